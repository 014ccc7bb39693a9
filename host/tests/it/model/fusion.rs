//! Load-time fusion of q/k/v and gate/up (llama and qwen3 declare it): the
//! host holds each layer's fused tensors once, the parts are gone, and the
//! fused quantized modules keep their quantization. Parity with the fused
//! layers is what tests/it/families/parity.rs checks.

use crate::common;

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
                let q = plugin_api::abi::WeightStore::quant(&*m.weights, name.as_str().into()).into_option();
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

/// The same checkpoint's weights after the family's rewriter but with no
/// fusion applied (what `LoadedModel::load` holds before `fuse`).
fn unfused(variant: &str, m: &LoadedModel) -> famlx::model::HostWeights {
    let ck = famlx::checkpoint::Checkpoint::open(&fixture(variant)).unwrap();
    famlx::model::HostWeights::rewritten(&m.family, &m.plan, &ck.tensors, &ck.on_disk, &ck.quant).unwrap()
}

/// gemma4 fuses q/k/v where a layer has all three (not in K=V global
/// layers, not in KV-shared layers), and a decoded token's q, k and v heads
/// are normed together (the v norm is unscaled) and roped in one call. The
/// logits are bit-for-bit those of the unfused model, prefill and decode.
#[test]
fn gemma4_fused_qkv_is_bit_equal_to_split() {
    let _g = mlx_lock();
    for variant in ["gemma4-bf16", "gemma4-e2b-bf16", "gemma4-q4", "gemma4-moe-hf-f32"] {
        let mut m = load(variant);
        let fused: Vec<&String> =
            m.weights.tensors.keys().filter(|n| n.ends_with("self_attn.qkv_proj.weight")).collect();
        assert!(!fused.is_empty(), "{variant}: no layer fused q/k/v");
        let n_fused = fused.len();
        let expect = common::parity::logit_steps(&mut m, 5);
        let plain = unfused(variant, &m);
        assert!(!plain.tensors.keys().any(|n| n.contains("qkv_proj")));
        // Exactly the layers with a v projection fused.
        let with_v = plain.tensors.keys().filter(|n| n.ends_with("self_attn.v_proj.weight")).count();
        assert_eq!(n_fused, with_v, "{variant}: fused layers vs layers with q, k and v");
        m.model = famlx::model::build(&m.family, &m.plan, &plain).unwrap();
        m.weights = std::rc::Rc::new(plain);
        let got = common::parity::logit_steps(&mut m, 5);
        for (i, (a, b)) in expect.iter().zip(&got).enumerate() {
            assert!(a == b, "{variant}: step {i}: fused and unfused logits differ");
        }
    }
}
