//! The ernie4_5 plugin's families (`ernie4_5`, `ernie4_5_moe`) against
//! mlx-lm on their fixtures, and the configs they refuse.

use super::{assert_names, refused_with};
use crate::families::parity::parity_in;

#[test]
fn ernie4_5_f32() {
    parity_in("ernie4_5-f32", "ernie4_5");
}
#[test]
fn ernie4_5_moe_f32() {
    parity_in("ernie4_5_moe-f32", "ernie4_5_moe");
}
#[test]
fn ernie4_5_moe_q4() {
    parity_in("ernie4_5_moe-q4", "ernie4_5_moe");
}

#[test]
fn ernie4_5_refuses_rope_scaling() {
    let e = refused_with("ernie4_5-f32", |c| c["rope_scaling"] = serde_json::json!({"type": "linear", "factor": 2.0}));
    assert_names(&e, "rope_scaling", "set");
}

#[test]
fn ernie4_5_moe_refuses_an_unknown_gate_activation() {
    let e = refused_with("ernie4_5_moe-f32", |c| c["moe_gate_act"] = "tanh".into());
    assert_names(&e, "moe_gate_act", "tanh");
}

#[test]
fn ernie4_5_moe_refuses_more_experts_per_token_than_experts() {
    let e = refused_with("ernie4_5_moe-f32", |c| c["moe_k"] = 5.into());
    assert_names(&e, "moe_k", "5");
}

/// Hugging Face's layout of an ERNIE 4.5 MoE checkpoint (one tensor per
/// expert and projection, the aux-free routing's score corrections and the
/// MTP block beside them) loads to the same model as mlx-lm's: the fixture
/// re-saved so gives its expected logits and tokens.
#[test]
fn ernie4_5_moe_hugging_face_layout_loads_as_mlx_lm_does() {
    use crate::common::{copy_dir, expected, fixture, mlx_lock, registry, Scratch};
    use famlx::{cache::CacheOptions, model::LoadedModel};
    let variant = "ernie4_5_moe-f32";
    let dir = Scratch::new("ernie4_5_moe-hf");
    copy_dir(&fixture(variant), dir.path());
    let _g = mlx_lock();
    let file = dir.path().join("model.safetensors");
    let (all, _) = mlx::io::load_safetensors(&file).unwrap();
    let mut hf: Vec<(String, mlx::Array)> = Vec::new();
    for (name, t) in &all {
        let Some((mlp, proj)) = name.split_once(".switch_mlp.") else {
            hf.push((name.clone(), t.clone()));
            continue;
        };
        for e in 0..t.dim(0) {
            hf.push((format!("{mlp}.experts.{e}.{proj}"), t.slice_axis(0, e, e + 1).unwrap().squeeze(&[0]).unwrap()));
        }
    }
    assert!(hf.len() > all.len(), "the fixture has stacked experts");
    let extra = mlx::zeros(&[4], mlx::Dtype::F32).unwrap();
    hf.push(("model.layers.1.mlp.moe_statics.e_score_correction_bias".into(), extra.clone()));
    hf.push(("model.mtp_block.0.input_layernorm.weight".into(), extra));
    let refs: Vec<(&str, &mlx::Array)> = hf.iter().map(|(k, v)| (k.as_str(), v)).collect();
    mlx::io::save_safetensors(&file, &refs, &[("format", "pt")]).unwrap();
    std::fs::remove_file(dir.path().join("model.safetensors.index.json")).unwrap();
    let mut m = LoadedModel::load(dir.path(), &registry(), None, CacheOptions::default())
        .unwrap_or_else(|e| panic!("{variant} per expert: load: {e:#}"));
    assert_eq!(m.family.name, "ernie4_5_moe");
    let errs = crate::common::parity::check_prompts(variant, &mut m, &expected(variant), true);
    assert!(errs.is_empty(), "{variant} per expert: {}", errs.join("\n"));
}
