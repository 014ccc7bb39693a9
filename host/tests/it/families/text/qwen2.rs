//! The qwen2 plugin's families (`qwen2`, `qwen2_moe`, `qwen3_moe`) against
//! mlx-lm on their fixtures, the configs they refuse, and a checkpoint
//! missing a bias its config implies.

use super::{assert_names, refused_with};
use crate::common::{copy_dir, fixture, mlx_lock, registry, Scratch};
use crate::families::parity::parity_in;
use famlx::cache::CacheOptions;
use famlx::model::LoadedModel;

#[test]
fn qwen2_f32() {
    parity_in("qwen2-f32", "qwen2");
}
#[test]
fn qwen2_q4() {
    parity_in("qwen2-q4", "qwen2");
}
#[test]
fn qwen2_moe_f32() {
    parity_in("qwen2_moe-f32", "qwen2_moe");
}
#[test]
fn qwen2_moe_q4() {
    parity_in("qwen2_moe-q4", "qwen2_moe");
}
#[test]
fn qwen3_moe_f32() {
    parity_in("qwen3_moe-f32", "qwen3_moe");
}
#[test]
fn qwen3_moe_q4() {
    parity_in("qwen3_moe-q4", "qwen3_moe");
}

#[test]
fn qwen2_refuses_an_unknown_activation() {
    let e = refused_with("qwen2-f32", |c| c["hidden_act"] = "gelu_pytorch_tanh".into());
    assert_names(&e, "hidden_act", "gelu_pytorch_tanh");
}

#[test]
fn qwen2_moe_refuses_rope_scaling() {
    let e = refused_with("qwen2_moe-f32", |c| c["rope_scaling"] = serde_json::json!({"type": "linear", "factor": 2.0}));
    assert_names(&e, "rope_scaling", "linear");
}

#[test]
fn qwen3_moe_refuses_more_experts_per_token_than_experts() {
    let e = refused_with("qwen3_moe-f32", |c| c["num_experts_per_tok"] = 9.into());
    assert_names(&e, "num_experts_per_tok", "9");
}

/// A qwen2 checkpoint missing a q/k/v bias is refused, the tensor named,
/// rather than loaded without it (which would give other tokens).
#[test]
fn qwen2_checkpoint_without_a_bias_is_refused() {
    super::refused_without("qwen2-f32", "model.layers.0.self_attn.q_proj.bias");
}

/// Hugging Face's layout of the experts (one tensor per expert and
/// projection) loads to the same model as mlx-lm's stacked one: the
/// fixture re-saved expert by expert gives its expected logits and tokens.
#[test]
fn per_expert_checkpoints_load_as_stacked() {
    for (variant, family) in [("qwen2_moe-f32", "qwen2_moe"), ("qwen3_moe-f32", "qwen3_moe")] {
        let dir = Scratch::new(variant);
        copy_dir(&fixture(variant), dir.path());
        let _g = mlx_lock();
        let file = dir.path().join("model.safetensors");
        let (all, _) = mlx::io::load_safetensors(&file).unwrap();
        let mut split: Vec<(String, mlx::Array)> = Vec::new();
        for (name, t) in &all {
            let Some((mlp, proj)) = name.split_once(".switch_mlp.") else {
                split.push((name.clone(), t.clone()));
                continue;
            };
            for e in 0..t.dim(0) {
                let one = t.slice_axis(0, e, e + 1).unwrap().squeeze(&[0]).unwrap();
                split.push((format!("{mlp}.experts.{e}.{proj}"), one));
            }
        }
        let refs: Vec<(&str, &mlx::Array)> = split.iter().map(|(k, v)| (k.as_str(), v)).collect();
        mlx::io::save_safetensors(&file, &refs, &[("format", "pt")]).unwrap();
        std::fs::remove_file(dir.path().join("model.safetensors.index.json")).unwrap();
        let mut m = LoadedModel::load(dir.path(), &registry(), None, CacheOptions::default())
            .unwrap_or_else(|e| panic!("{variant} per expert: load: {e:#}"));
        assert_eq!(m.family.name, family);
        let exp = crate::common::expected(variant);
        let errs = crate::common::parity::check_prompts(variant, &mut m, &exp, true);
        assert!(errs.is_empty(), "{variant} per expert: {}", errs.join("\n"));
    }
}

/// `famlx convert -q` writes what `mlx_lm.convert -q` writes for the MoE
/// families: the same tensors byte for byte and the same quantization
/// block (qwen3_moe's routers pinned at 8 bits, qwen2_moe's not).
#[test]
fn convert_quantizes_as_mlx_lm() {
    let s = Scratch::new("qwen2-convert");
    let mut jobs = Vec::new();
    for src in ["qwen2-f32", "qwen2_moe-f32", "qwen3_moe-f32"] {
        let ours = s.path().join(format!("{src}-famlx"));
        let theirs = s.path().join(format!("{src}-mlx-lm"));
        let srcp = fixture(src);
        let args = ["--hf-path", srcp.to_str().unwrap(), "-q", "--q-bits", "4", "--q-group-size", "32"];
        let o = crate::common::run(&[&["convert"], &args[..], &["--mlx-path", ours.to_str().unwrap()]].concat());
        assert!(o.status.success(), "famlx convert {src}: {}", String::from_utf8_lossy(&o.stderr));
        crate::common::reference::mlx_lm_convert(&[&args[..], &["--mlx-path", theirs.to_str().unwrap()]].concat());
        jobs.push(serde_json::json!({"compare": [ours, theirs]}));
    }
    let results = crate::common::reference::check(&serde_json::Value::Array(jobs), s.path());
    for (src, c) in ["qwen2-f32", "qwen2_moe-f32", "qwen3_moe-f32"].iter().zip(&results) {
        assert_eq!(c["differ"], serde_json::json!([]), "{src}: tensors differ from mlx_lm.convert's");
        assert_eq!(c["only_a"], serde_json::json!([]), "{src}: tensors only famlx wrote");
        assert_eq!(c["only_b"], serde_json::json!([]), "{src}: tensors famlx did not write");
        assert_eq!(c["quant_a"], c["quant_b"], "{src}: quantization blocks differ");
    }
}
