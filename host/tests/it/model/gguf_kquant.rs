//! GGUF K-quant weights held packed compute what their dequantized values
//! compute: MLX's quantized matmul over the triple famlx builds from a
//! Q4_K (and every other block type's) tensor equals a float32 matmul with
//! gguf-py's dequantized values (fixtures/gguf-quants, made by
//! fixtures/make_gguf_fixtures.py).

use crate::common;
use famlx::checkpoint::Checkpoint;
use famlx_formats::gguf::GgmlType;
use mlx::quant::{quantized_matmul, QuantSpec, Quantized};

#[test]
fn packed_kquants_matmul_as_their_float32_values() {
    let _g = common::mlx_lock();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/gguf-quants");
    let q = Checkpoint::open(&dir.join("quants.gguf")).unwrap();
    let e = Checkpoint::open(&dir.join("expected.gguf")).unwrap();
    for ty in [
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q4_0,
        GgmlType::Q5_0,
        GgmlType::Q8_0,
        GgmlType::IQ4_NL,
        GgmlType::IQ4_XS,
        GgmlType::Q6_K,
    ] {
        let name = ty.name();
        let w = &q.tensors[&format!("{name}.weight")];
        let packed = Quantized {
            w: w.clone(),
            scales: q.tensors[&format!("{name}.scales")].clone(),
            biases: Some(q.tensors[&format!("{name}.biases")].clone()),
        };
        let dense = &e.tensors[&format!("{name}.weight")];
        let k = dense.dim(-1);
        let bits = (w.dim(-1) * 32 / k) as i32;
        let x = mlx::random::normal(&[5, k], mlx::Dtype::F32, 0.0, 1.0, Some(&mlx::random::key(7).unwrap())).unwrap();
        let got = quantized_matmul(&x, &packed, &QuantSpec::affine(32, bits), true).unwrap();
        let want = x.matmul(&dense.t().unwrap()).unwrap();
        let (got, want) = (got.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = got.iter().zip(&want).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        // Exact types: float32 summation order only. Q6_K is requantized
        // (8 bits per group of 32): its error is the requantization's.
        let tol = if ty == GgmlType::Q6_K { 1e-2 } else { 1e-5 };
        assert!(worst <= tol * scale, "{name}: |packed - dense| up to {worst} of {scale}");
        eprintln!("{name}: max |packed - dense| / max |dense| = {:.2e}", worst / scale);
    }
}
