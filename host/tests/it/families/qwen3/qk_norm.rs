//! One-token attention with q/k norms (Qwen3) norms every head with one
//! weightless RMS norm times per-head scales, then ropes them in one call.
//! That path must give bit-for-bit what separate q and k norms with their
//! weights give (MLX's weighted norm also rounds the normed value to the
//! activation dtype before scaling), over a quantized and a dense cache.

use crate::common;

use abi_stable::std_types::RVec;
use common::mlx_lock;
use famlx::cache::{CacheImpl, KvCache, QBits, QuantizedKvCache, SharedCache};
use mlx::nn::{Rope, RopeScaling, Weights};
use mlx::quant::QuantSpec;
use mlx::{Array, Dtype};
use plugin_api::family::Caches;
use plugin_api::layers::{Attention, AttentionShape};
use std::collections::HashMap;

struct Map(HashMap<String, Array>);

impl Weights for Map {
    fn get(&self, name: &str) -> Option<Array> {
        self.0.get(name).cloned()
    }
    fn quant(&self, _prefix: &str) -> Option<QuantSpec> {
        None
    }
}

fn rand(shape: &[i32], scale: f64, dt: Dtype) -> Array {
    mlx::random::normal(shape, Dtype::F32, 0.0, 1.0, None).unwrap().mul_s(scale).unwrap().astype(dt).unwrap()
}

fn attention(dt: Dtype, fused: bool) -> Attention {
    let (hidden, hq, hkv, d) = (64, 4, 2, 32);
    let mut w = HashMap::new();
    if fused {
        w.insert("a.qkv_proj.weight".into(), rand(&[(hq + 2 * hkv) * d, hidden], 0.2, dt));
    } else {
        w.insert("a.q_proj.weight".into(), rand(&[hq * d, hidden], 0.2, dt));
        w.insert("a.k_proj.weight".into(), rand(&[hkv * d, hidden], 0.2, dt));
        w.insert("a.v_proj.weight".into(), rand(&[hkv * d, hidden], 0.2, dt));
    }
    w.insert("a.o_proj.weight".into(), rand(&[hidden, hq * d], 0.2, dt));
    // Scales far from 1, so a norm applied to the wrong heads shows.
    w.insert("a.q_norm.weight".into(), rand(&[d], 1.0, dt).add_s(1.0).unwrap());
    w.insert("a.k_norm.weight".into(), rand(&[d], 1.0, dt).sub_s(0.5).unwrap());
    let rope = Rope::new(d, 1_000_000.0, false, &RopeScaling::None).unwrap();
    let shape = AttentionShape::new(hidden, hq, hkv, d).qk_norms(1e-6);
    Attention::load(&Map(w), "a", &shape, rope).unwrap()
}

fn caches(quantized: bool) -> RVec<plugin_api::abi::CacheBox> {
    let c: Box<dyn CacheImpl> = if quantized {
        let q = Some(QBits { bits: 8, group_size: 32 });
        Box::new(QuantizedKvCache::new(q, q))
    } else {
        Box::new(KvCache::new())
    };
    vec![SharedCache::new(c).boxed()].into()
}

/// Feeds a 5-token prompt, then 4 single tokens; returns every output.
fn run(a: &Attention, xs: &[Array], quantized: bool) -> Vec<Vec<f32>> {
    let mut boxes = caches(quantized);
    let mut caches = Caches::new(&mut boxes);
    xs.iter()
        .map(|x| {
            let y = a.forward(x, &mut caches, 0).unwrap();
            y.astype(Dtype::F32).unwrap().to_vec::<f32>().unwrap()
        })
        .collect()
}

#[test]
fn one_norm_for_all_heads_is_bit_equal_to_separate_norms() {
    let _g = mlx_lock();
    mlx::random::seed(7).unwrap();
    for dt in [Dtype::BF16, Dtype::F32] {
        let merged = attention(dt, true);
        assert!(merged.head_norms.is_some(), "{dt:?}: fused q/k/v with both norms should take the merged path");
        let separate = Attention { head_norms: None, ..merged.clone() };
        let mut xs = vec![rand(&[1, 5, 64], 1.0, dt)];
        xs.extend((0..4).map(|_| rand(&[1, 1, 64], 1.0, dt)));
        for quantized in [false, true] {
            let a = run(&merged, &xs, quantized);
            let b = run(&separate, &xs, quantized);
            assert_eq!(a, b, "{dt:?} quantized={quantized}: merged q/k norms differ from separate ones");
        }
        // Unfused projections keep the plain path.
        assert!(attention(dt, false).head_norms.is_none());
    }
}

/// Norms that differ in epsilon, dtype or width keep their separate path
/// (no merged scales, and no load error).
#[test]
fn differing_norms_are_not_merged() {
    let _g = mlx_lock();
    let norm = |d: i32, dt: Dtype, eps: f32| mlx::nn::RmsNorm { weight: rand(&[d], 1.0, dt), eps };
    let q = norm(32, Dtype::BF16, 1e-6);
    use plugin_api::layers::HeadNorms;
    assert!(HeadNorms::new(&q, &norm(32, Dtype::BF16, 1e-6), 4, 2).unwrap().is_some());
    assert!(HeadNorms::new(&q, &norm(32, Dtype::F32, 1e-6), 4, 2).unwrap().is_none());
    assert!(HeadNorms::new(&q, &norm(32, Dtype::BF16, 1e-5), 4, 2).unwrap().is_none());
    assert!(HeadNorms::new(&q, &norm(16, Dtype::BF16, 1e-6), 4, 2).unwrap().is_none());
}
