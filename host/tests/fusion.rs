//! Load-time fusion of q/k/v and gate/up (llama and qwen3 declare it): the
//! host holds each layer's fused tensors once, the parts are gone, and the
//! fused quantized modules keep their quantization. Parity with the fused
//! layers is what tests/parity.rs checks.

mod common;

use common::{fixture, mlx_lock};
use famlx::cache::CacheOptions;
use famlx::model::LoadedModel;

fn load(variant: &str) -> LoadedModel {
    let r = famlx::plugins::Registry::discover(&famlx::plugins::search_dirs(&[]));
    LoadedModel::load(&fixture(variant), &r, None, CacheOptions::default())
        .unwrap_or_else(|e| panic!("{variant}: {e:#}"))
}

#[test]
fn qkv_and_gate_up_are_fused_once() {
    let _g = mlx_lock();
    for variant in ["llama-bf16", "llama-q4", "qwen3-q8", "llama-hf-bf16"] {
        let m = load(variant);
        let t = &m.weights.tensors;
        for i in 0..2 {
            let a = format!("model.layers.{i}.self_attn");
            let f = format!("model.layers.{i}.mlp");
            let qkv = t.get(&format!("{a}.qkv_proj.weight")).unwrap_or_else(|| panic!("{variant}: no {a}.qkv_proj"));
            assert!(t.get(&format!("{f}.gate_up_proj.weight")).is_some(), "{variant}: no gate_up");
            for gone in ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj"] {
                for s in ["weight", "scales", "biases"] {
                    let n = format!("model.layers.{i}.{gone}.{s}");
                    assert!(!t.contains_key(&n), "{variant}: {n} still held");
                }
            }
            // q (4 heads) + k + v (2 heads each), head_dim 32: 256 rows.
            assert_eq!(qkv.dim(0), 256, "{variant}");
            let quantized = variant.contains("-q");
            assert_eq!(t.contains_key(&format!("{a}.qkv_proj.scales")), quantized, "{variant}");
            if quantized {
                let name = format!("{a}.qkv_proj");
                let q = plugin_api::WeightStore::quant(&*m.weights, name.as_str().into()).into_option();
                let bits = if variant.ends_with("q4") { 4 } else { 8 };
                assert_eq!(q.map(|q| q.bits), Some(bits), "{variant}: fused module lost its quantization");
            }
        }
    }
}

/// gemma4 and qwen3_5 fuse gate/up in their dense MLPs, shared experts and
/// MTP layers; no unfused gate_proj is left where a fusion applied (routed
/// experts, `switch_mlp` / `switch_glu`, are stacked per expert instead).
#[test]
fn gate_up_fused_in_gemma4_and_qwen3_5() {
    let _g = mlx_lock();
    for (variant, suffix) in [
        ("gemma4-bf16", "mlp.gate_up_proj.weight"),
        ("gemma4-moe-q4", "mlp.gate_up_proj.weight"),
        ("qwen3_5-q4", "mlp.gate_up_proj.weight"),
        ("qwen3_5_moe-q4", "shared_expert.gate_up_proj.weight"),
        ("qwen3_5-mtp-hf-bf16", "mtp.layers.0.mlp.gate_up_proj.weight"),
    ] {
        let m = load(variant);
        let names: Vec<&String> = m.weights.tensors.keys().collect();
        assert!(names.iter().any(|n| n.ends_with(suffix)), "{variant}: no *{suffix}");
        let left: Vec<_> = names.iter().filter(|n| n.ends_with("gate_proj.weight") && !n.contains("switch_")).collect();
        assert!(left.is_empty(), "{variant}: unfused {left:?}");
    }
}
