//! `fast` kernels, quantization and random numbers against values recorded
//! from MLX's Python API (`tests/data/make_expected.py`).

mod common;

use common::*;
use mlx::fast::{self, Mask, RopeOffset};
use mlx::quant::{self, QuantSpec, Quantized};
use mlx::{random, Array, Dtype};

#[test]
fn norms() {
    let e = Expected::load();
    let (x, w, b) = (e.get("fast.x"), e.get("fast.w"), e.get("fast.b"));
    check_tol(&e, "fast.rms", &fast::rms_norm(&x, Some(&w), 1e-5).unwrap(), 1e-5);
    check_tol(&e, "fast.rms_noweight", &fast::rms_norm(&x, None, 1e-6).unwrap(), 1e-5);
    check_tol(&e, "fast.ln", &fast::layer_norm(&x, Some(&w), Some(&b), 1e-5).unwrap(), 1e-5);
    check_tol(&e, "fast.ln_noaffine", &fast::layer_norm(&x, None, None, 1e-5).unwrap(), 1e-5);
}

#[test]
fn rope() {
    let e = Expected::load();
    let x = e.get("rope.x");
    let t = 1e-5;
    let r = fast::rope(&x, 16, false, Some(10000.0), 1.0, RopeOffset::Int(3), None).unwrap();
    check_tol(&e, "rope.int", &r, t);
    let r = fast::rope(&x, 8, true, Some(500.0), 0.5, RopeOffset::Int(0), None).unwrap();
    check_tol(&e, "rope.trad_partial", &r, t);
    let offs = e.get("rope.offsets");
    let r = fast::rope(&x, 16, false, Some(10000.0), 1.0, RopeOffset::Array(&offs), None).unwrap();
    check_tol(&e, "rope.arr", &r, t);
    // A scalar array offset equals the int offset.
    let r3 = fast::rope(&x, 16, false, Some(10000.0), 1.0, RopeOffset::Array(&Array::i32(3)), None).unwrap();
    check_tol(&e, "rope.int", &r3, t);
    let freqs = e.get("rope.freqs");
    let r = fast::rope(&x, 16, false, None, 1.0, RopeOffset::Int(2), Some(&freqs)).unwrap();
    check_tol(&e, "rope.custom", &r, t);
    // Exactly one of base and freqs.
    assert!(fast::rope(&x, 16, false, Some(1.0), 1.0, RopeOffset::Int(0), Some(&freqs)).is_err());
    assert!(fast::rope(&x, 16, false, None, 1.0, RopeOffset::Int(0), None).is_err());
}

#[test]
fn attention() {
    let e = Expected::load();
    let (q, k, v) = (e.get("sdpa.q"), e.get("sdpa.k"), e.get("sdpa.v"));
    let scale = 1.0 / 8f32.sqrt();
    let t = 1e-5;
    let sd = |m: Mask<'_>, s: Option<&Array>| fast::scaled_dot_product_attention(&q, &k, &v, scale, m, s).unwrap();
    check_tol(&e, "sdpa.none", &sd(Mask::None, None), t);
    check_tol(&e, "sdpa.causal", &sd(Mask::Causal, None), t);
    let bm = e.get("sdpa.bmask");
    assert_eq!(bm.dtype(), Dtype::Bool);
    check_tol(&e, "sdpa.bool", &sd(Mask::Array(&bm), None), t);
    check_tol(&e, "sdpa.add", &sd(Mask::Array(&e.get("sdpa.amask")), None), t);
    check_tol(&e, "sdpa.with_sinks", &sd(Mask::Causal, Some(&e.get("sdpa.sinks"))), t);
    // By hand: one key means the output is that value, whatever the scores.
    let q1 = ones(&[1, 2, 1, 4]);
    let k1 = ones(&[1, 1, 1, 4]);
    let v1 = f32s(&[1.0, 2.0, 3.0, 4.0], &[1, 1, 1, 4]);
    let o = fast::scaled_dot_product_attention(&q1, &k1, &v1, 0.5, Mask::Causal, None).unwrap();
    assert_eq!(o.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0, 4.0]);
}

#[test]
fn gated_delta() {
    let e = Expected::load();
    let g = |n: &str| e.get(&format!("gdn.{n}"));
    let (q, k, v, gg, b) = (g("q"), g("k"), g("v"), g("g"), g("beta"));
    let (y0, s0) = fast::gated_delta_update(&q, &k, &v, &gg, &b, None, None).unwrap();
    check_tol(&e, "gdn.y0", &y0, 1e-4);
    check_tol(&e, "gdn.s0", &s0, 1e-4);
    let (y1, s1) = fast::gated_delta_update(&q, &k, &v, &gg, &b, Some(&s0), None).unwrap();
    check_tol(&e, "gdn.y1", &y1, 1e-4);
    check_tol(&e, "gdn.s1", &s1, 1e-4);
}

#[test]
fn quantization() {
    let e = Expected::load();
    let (w, x) = (e.get("q.w"), e.get("q.x"));
    let a4 = QuantSpec::affine(64, 4);
    let q = quant::quantize(&w, &a4).unwrap();
    assert_eq!(q.w.dtype(), Dtype::U32);
    assert_exact("q.a4.wq", &q.w, &e.get("q.a4.wq"));
    check(&e, "q.a4.scales", &q.scales);
    check(&e, "q.a4.biases", q.biases.as_ref().unwrap());
    check(&e, "q.a4.deq", &quant::dequantize(&q, &a4, None).unwrap());
    let d16 = quant::dequantize(&q, &a4, Some(Dtype::BF16)).unwrap();
    assert_eq!(d16.dtype(), Dtype::BF16);
    check_tol(&e, "q.a4.qmm", &quant::quantized_matmul(&x, &q, &a4, true).unwrap(), 1e-4);
    // The quantized matmul equals dequantize + matmul.
    let dq = quant::dequantize(&q, &a4, None).unwrap();
    let manual = x.matmul(&dq.t().unwrap()).unwrap();
    assert_close("qmm vs dequant", &quant::quantized_matmul(&x, &q, &a4, true).unwrap(), &manual, 1e-4, 1e-4);

    let a8 = QuantSpec::affine(32, 8);
    let q8 = quant::quantize(&w, &a8).unwrap();
    assert_exact("q.a8.wq", &q8.w, &e.get("q.a8.wq"));
    check_tol(&e, "q.a8.qmm", &quant::quantized_matmul(&x, &q8, &a8, true).unwrap(), 1e-4);

    let mx = QuantSpec { group_size: 32, bits: 4, mode: "mxfp4".into() };
    let qm = quant::quantize(&w, &mx).unwrap();
    assert!(qm.biases.is_none(), "mxfp4 has no biases");
    assert_exact("q.mx.wq", &qm.w, &e.get("q.mx.wq"));
    assert_exact("q.mx.scales", &qm.scales, &e.get("q.mx.scales"));
    check(&e, "q.mx.deq", &quant::dequantize(&qm, &mx, None).unwrap());
    check_tol(&e, "q.mx.qmm", &quant::quantized_matmul(&x, &qm, &mx, true).unwrap(), 1e-4);

    // Experts (MoE): gather_mm and gather_qmm.
    let (ew, ex, idx) = (e.get("q.ew"), e.get("q.ex"), e.get("q.eidx"));
    let g = quant::gather_mm(&ex, &ew.swapaxes(-1, -2).unwrap(), None, Some(&idx), false).unwrap();
    check_tol(&e, "q.gather_mm", &g, 1e-4);
    let s = QuantSpec::affine(32, 4);
    let eq: Quantized = quant::quantize(&ew, &s).unwrap();
    let gq = quant::gather_qmm(&ex, &eq, &s, None, Some(&idx), true, false).unwrap();
    check_tol(&e, "q.gather_qmm", &gq, 1e-4);
    // Sorted indices give the same rows (reordered by the caller).
    let sorted_idx = Array::from_slice(&[0u32, 1, 2, 2], &[4]).unwrap();
    let perm = Array::from_slice(&[1i32, 3, 0, 2], &[4]).unwrap();
    let xs = ex.take(&perm, 0).unwrap();
    let gs = quant::gather_qmm(&xs, &eq, &s, None, Some(&sorted_idx), true, true).unwrap();
    assert_close("gather_qmm sorted", &gs, &gq.take(&perm, 0).unwrap(), 1e-4, 1e-4);
}

#[test]
fn random_with_keys() {
    let e = Expected::load();
    let k = random::key(42).unwrap();
    assert_exact("rand.key", &k, &e.get("rand.key"));
    assert_exact("rand.split", &random::split(&k, 3).unwrap(), &e.get("rand.split"));
    check(&e, "rand.uniform", &random::uniform(-2.0, 3.0, &[3, 4], Dtype::F32, Some(&k)).unwrap());
    check(&e, "rand.normal", &random::normal(&[3, 4], Dtype::F32, 1.0, 2.0, Some(&k)).unwrap());
    let nb = random::normal(&[8], Dtype::BF16, 0.0, 1.0, Some(&k)).unwrap();
    assert_eq!(nb.dtype(), Dtype::BF16);
    check_tol(&e, "rand.normal_bf16", &nb, 0.0);
    let logits = e.get("rand.logits");
    assert_exact("rand.categorical", &random::categorical(&logits, -1, Some(&k)).unwrap(), &e.get("rand.categorical"));
    let cn = random::categorical_n(&logits, -1, 6, Some(&k)).unwrap();
    assert_exact("rand.categorical_n", &cn, &e.get("rand.categorical_n"));
    assert_exact(
        "rand.randint",
        &random::randint(-5, 17, &[10], Dtype::I32, Some(&k)).unwrap(),
        &e.get("rand.randint"),
    );
    let bern = random::bernoulli(&Array::f32(0.3), &[10], Some(&k)).unwrap();
    assert_exact("rand.bernoulli", &bern, &e.get("rand.bernoulli"));
    check(&e, "rand.gumbel", &random::gumbel(&[6], Dtype::F32, Some(&k)).unwrap());
    // Same key, same numbers; different keys differ.
    let a = random::uniform(0.0, 1.0, &[16], Dtype::F32, Some(&k)).unwrap();
    let b = random::uniform(0.0, 1.0, &[16], Dtype::F32, Some(&k)).unwrap();
    assert_close("same key", &a, &b, 0.0, 0.0);
    let k2 = random::key(43).unwrap();
    let c = random::uniform(0.0, 1.0, &[16], Dtype::F32, Some(&k2)).unwrap();
    assert!(a.ne(&c).unwrap().any_all().unwrap().item_i64().unwrap() == 1);
    // Draws stay in range.
    let u = random::uniform(-2.0, 3.0, &[1000], Dtype::F32, Some(&k2)).unwrap();
    assert!(u.min_all().unwrap().item_f32().unwrap() >= -2.0);
    assert!(u.max_all().unwrap().item_f32().unwrap() < 3.0);
    // A zero-probability class is never drawn.
    let draws = random::categorical_n(&logits, -1, 200, Some(&k2)).unwrap();
    let first = draws.take(&Array::i32(0), 0).unwrap();
    assert_eq!(
        first.eq(&Array::scalar_i(3, first.dtype()).unwrap()).unwrap().any_all().unwrap().item_i64().unwrap(),
        0
    );
    assert!(random::categorical_n(&logits, -1, 0, Some(&k)).is_err());
}

/// The global key: only this test touches it in this binary.
#[test]
fn random_global_seed() {
    let e = Expected::load();
    random::seed(7).unwrap();
    let a = random::uniform(0.0, 1.0, &[4], Dtype::F32, None).unwrap();
    check(&e, "rand.seed7_uniform", &a);
    random::seed(7).unwrap();
    let b = random::uniform(0.0, 1.0, &[4], Dtype::F32, None).unwrap();
    assert_close("reseeded", &b, &a, 0.0, 0.0);
    let c = random::uniform(0.0, 1.0, &[4], Dtype::F32, None).unwrap();
    assert!(c.ne(&a).unwrap().any_all().unwrap().item_i64().unwrap() == 1, "the global key advances");
}
