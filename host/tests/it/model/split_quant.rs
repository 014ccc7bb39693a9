//! Quantization follows a family's rewriter: a mixed-precision checkpoint
//! that stores q/k/v fused (`qkv_proj`, 8 bits) and gate/up fused
//! (`gate_up_proj`, 4 bits by default) is served by a family that splits
//! them in `rewrite` (the split-fused test plugin). The split modules keep
//! their source's quantization, and the logits are bit-for-bit those of
//! the llama family reading the same fused tensors as stored.

use crate::common;

use common::{cdylib, fixture_copy, mlx_lock, Scratch};
use famlx::cache::CacheOptions;
use famlx::model::LoadedModel;
use famlx::plugins::{load_plugin, plugin_pattern, Registry};
use mlx::quant::{quantize, QuantSpec};
use mlx::{concatenate, Array};
use plugin_api::abi::WeightStore;
use std::collections::HashMap;
use std::path::Path;

/// Rewrites the llama-bf16 fixture in `dir` as a fused, mixed-precision
/// checkpoint of `model_type`: per layer `qkv_proj` at 8 bits (a
/// per-module entry), `gate_up_proj`, `o_proj` and `down_proj` at the
/// default 4 bits, embedding and head dense.
fn fused_mixed_checkpoint(dir: &Path, model_type: &str) {
    let (mut t, _) = mlx::io::load_safetensors(&dir.join("model.safetensors")).unwrap();
    let (eight, four) = (QuantSpec::affine(32, 8), QuantSpec::affine(32, 4));
    let mut out: HashMap<String, Array> = HashMap::new();
    let mut put = |name: String, w: &Array, spec: &QuantSpec| {
        let q = quantize(w, spec).unwrap();
        out.insert(format!("{name}.weight"), q.w);
        out.insert(format!("{name}.scales"), q.scales);
        out.insert(format!("{name}.biases"), q.biases.unwrap());
    };
    let mut quant = serde_json::json!({"group_size": 32, "bits": 4});
    for i in 0..2 {
        let l = format!("model.layers.{i}");
        let mut take = |n: &str| t.remove(&format!("{l}.{n}.weight")).unwrap();
        let qkv = concatenate(&[&take("self_attn.q_proj"), &take("self_attn.k_proj"), &take("self_attn.v_proj")], 0);
        put(format!("{l}.self_attn.qkv_proj"), &qkv.unwrap(), &eight);
        put(
            format!("{l}.mlp.gate_up_proj"),
            &concatenate(&[&take("mlp.gate_proj"), &take("mlp.up_proj")], 0).unwrap(),
            &four,
        );
        put(format!("{l}.self_attn.o_proj"), &take("self_attn.o_proj"), &four);
        put(format!("{l}.mlp.down_proj"), &take("mlp.down_proj"), &four);
        quant[format!("{l}.self_attn.qkv_proj")] = serde_json::json!({"group_size": 32, "bits": 8});
    }
    out.extend(t);
    let arrays: Vec<(&str, &Array)> = out.iter().map(|(k, v)| (k.as_str(), v)).collect();
    std::fs::remove_file(dir.join("model.safetensors.index.json")).ok();
    mlx::io::save_safetensors(&dir.join("model.safetensors"), &arrays, &[("format", "mlx")]).unwrap();
    let cfg_path = dir.join("config.json");
    let mut cfg: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&cfg_path).unwrap()).unwrap();
    cfg["model_type"] = model_type.into();
    cfg["quantization"] = quant;
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
}

#[test]
fn modules_split_in_rewrite_keep_their_quantization() {
    let _g = mlx_lock();
    let fused = fixture_copy("llama-bf16");
    fused_mixed_checkpoint(fused.path(), "llama");
    let mut reference = LoadedModel::load(fused.path(), &common::registry(), None, CacheOptions::default())
        .unwrap_or_else(|e| panic!("llama on the fused checkpoint: {e:#}"));
    let want = common::parity::logit_steps(&mut reference, 4);

    let split = fixture_copy("llama-bf16");
    fused_mixed_checkpoint(split.path(), "splitfused");
    let plugins = Scratch::new("split-fused-plugin");
    let (pre, suf) = plugin_pattern();
    let so = plugins.path().join(format!("{pre}splitfused{suf}"));
    std::fs::copy(cdylib("famlx_testplugin_split_fused"), &so).unwrap();
    let reg = Registry { plugins: vec![load_plugin(&so, false).unwrap()], ..Default::default() };
    let mut m = LoadedModel::load(split.path(), &reg, None, CacheOptions::default())
        .unwrap_or_else(|e| panic!("the split-fused family: {e:#}"));

    // The parts the rewriter made carry their source's 8 bits; the rest the default 4.
    let bits = |name: &str| m.weights.quant(name.into()).into_option().map(|q| q.bits);
    for part in ["q_proj", "k_proj", "v_proj"] {
        assert_eq!(bits(&format!("model.layers.1.self_attn.{part}")), Some(8), "{part}");
    }
    assert_eq!(bits("model.layers.1.mlp.gate_proj"), Some(4));
    assert!(!m.weights.tensors.keys().any(|n| n.contains("qkv_proj") || n.contains("gate_up_proj")));

    let got = common::parity::logit_steps(&mut m, 4);
    for (i, (a, b)) in want.iter().zip(&got).enumerate() {
        assert!(a == b, "step {i}: split and fused logits differ");
    }
}
