//! The quantized matmul on CPU streams against `x @ dequantize(w).T`
//! computed in float32: with float32 activations famlx's kernel (mlx-sys,
//! replacing MLX's CPU one) to 1e-5 of the largest output, for 4, 5 and 8
//! bits (float32 or float16 scales), groups of 32, 64 and 128, one to three rows (weights streamed per
//! row) and four or more (dequantized panels: partial panels, row tails,
//! depths past one cache block), the thread pool, a non-contiguous `x`;
//! float16 / bfloat16 activations bit for bit as MLX's own kernel computes
//! them (famlx's kernel with AVX-512, MLX's elsewhere).

mod common;

use mlx::quant::{self, QuantSpec};
use mlx::{random, Array, Dtype};

fn check(m: i32, n: i32, k: i32, bits: i32, gs: i32, dtype: Dtype, transposed_x: bool) {
    let spec = QuantSpec::affine(gs, bits);
    let w = random::normal(&[n, k], Dtype::F32, 0.0, 1.0, None).unwrap().astype(dtype).unwrap();
    let q = quant::quantize(&w, &spec).unwrap();
    mlx::eval(&[&q.w, &q.scales, q.biases.as_ref().unwrap()]).unwrap();
    let x = if transposed_x {
        random::normal(&[k, m], Dtype::F32, 0.0, 1.0, None).unwrap().astype(dtype).unwrap().t().unwrap()
    } else {
        random::normal(&[m, k], Dtype::F32, 0.0, 1.0, None).unwrap().astype(dtype).unwrap()
    };
    let what = format!("m{m} n{n} k{k} {bits}-bit gs{gs} {dtype:?} transposed {transposed_x}");
    let isa_best = std::env::var("FAMLX_CPU_ISA").map_or(true, |v| v == "best");
    if dtype != Dtype::F32 {
        // Half precision: bit for bit MLX's own kernel (famlx's with AVX-512).
        let ours = common::on_cpu() && isa_best && common::avx512();
        common::same_bits_as_mlx("FAMLX_CPU_QMM", "FamlxCpuQuantizedMatmul", ours, &what, || {
            quant::quantized_matmul(&x, &q, &spec, true).unwrap()
        });
        return;
    }
    let got = quant::quantized_matmul(&x, &q, &spec, true).unwrap();
    let census = mlx::graph_census(&[&got]).unwrap();
    let ours = census.iter().any(|(name, _)| name == "FamlxCpuQuantizedMatmul");
    assert_eq!(ours, common::on_cpu(), "{census:?}");
    assert_eq!(got.shape(), vec![m, n]);
    assert_eq!(got.dtype(), dtype);
    let f32s = |a: &Array| a.astype(Dtype::F32).unwrap().to_vec::<f32>().unwrap();
    let deq = quant::dequantize(&q, &spec, Some(Dtype::F32)).unwrap();
    let want = x.astype(Dtype::F32).unwrap().matmul(&deq.t().unwrap()).unwrap();
    let (g, w) = (f32s(&got), want.to_vec::<f32>().unwrap());
    let scale = w.iter().fold(0f32, |a, v| a.max(v.abs()));
    let d = g.iter().zip(&w).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    // float32 sums in another order.
    assert!(d <= 1e-5 * scale, "{what}: {d} of {scale}");
}

#[test]
fn quantized_matmul_matches_the_dequantized_product() {
    // Every SIMD level this CPU has (the kernels read FAMLX_CPU_ISA per
    // product; this is the only test in the binary, so no other thread reads
    // the environment meanwhile).
    for isa in ["plain", "avx2", "best"] {
        std::env::set_var("FAMLX_CPU_ISA", isa);
        check_all();
    }
    std::env::remove_var("FAMLX_CPU_ISA");
}

fn check_all() {
    for dtype in [Dtype::F32, Dtype::F16, Dtype::BF16] {
        for (bits, gs) in [(4, 32), (4, 64), (8, 32), (8, 64)] {
            check(1, 48, 256, bits, gs, dtype, false);
            check(3, 40, 192, bits, gs, dtype, false);
            check(4, 40, 192, bits, gs, dtype, false);
            check(7, 40, 192, bits, gs, dtype, false);
        }
    }
    for bits in [4, 8] {
        check(1, 72, 512, bits, 128, Dtype::F32, false);
        check(13, 50, 640, bits, 32, Dtype::F32, false);
        check(128, 96, 576, bits, 64, Dtype::F32, false);
        check(6, 33, 1024, bits, 128, Dtype::F32, false);
    }
    // Large enough for two threads; an x that is a transposed view.
    check(3, 1000, 1024, 4, 32, Dtype::F32, true);
    check(1, 4096, 1024, 8, 64, Dtype::F32, false);
    for dtype in [Dtype::BF16, Dtype::F16] {
        check(1, 1000, 1024, 4, 64, dtype, true);
        check(2, 33, 256, 8, 32, dtype, false);
        check(20, 50, 256, 4, 128, dtype, false);
    }
    // 5 bits (GGUF's Q5 types), float32 activations: values straddle words.
    for gs in [32, 64] {
        check(1, 48, 256, 5, gs, Dtype::F32, false);
        check(3, 40, 192, 5, gs, Dtype::F32, false);
        check(7, 40, 192, 5, gs, Dtype::F32, false);
    }
    check(13, 50, 640, 5, 32, Dtype::F32, false);
    check(3, 1000, 1024, 5, 32, Dtype::F32, true);
    // float16 scales with float32 activations (a GGUF's Q4_0/Q5_0/Q8_0).
    for bits in [4, 5, 8] {
        check_half_scales(1, 64, 512, bits);
        check_half_scales(9, 40, 256, bits);
    }
}

/// float32 `x` against float16 scales and biases: famlx's kernel, within
/// 1e-5 of the float32 product.
fn check_half_scales(m: i32, n: i32, k: i32, bits: i32) {
    let spec = QuantSpec::affine(32, bits);
    let w = random::normal(&[n, k], Dtype::F32, 0.0, 1.0, None).unwrap().astype(Dtype::F16).unwrap();
    let q = quant::quantize(&w, &spec).unwrap();
    assert_eq!(q.scales.dtype(), Dtype::F16);
    let x = random::normal(&[m, k], Dtype::F32, 0.0, 1.0, None).unwrap();
    let got = quant::quantized_matmul(&x, &q, &spec, true).unwrap();
    let census = mlx::graph_census(&[&got]).unwrap();
    assert_eq!(census.iter().any(|(name, _)| name == "FamlxCpuQuantizedMatmul"), common::on_cpu(), "{census:?}");
    assert_eq!(got.dtype(), Dtype::F32);
    // The reference dequantizes from float32 copies of the scales (MLX's
    // dequantize would compute in float16).
    let wide = quant::Quantized {
        w: q.w.clone(),
        scales: q.scales.astype(Dtype::F32).unwrap(),
        biases: Some(q.biases.as_ref().unwrap().astype(Dtype::F32).unwrap()),
    };
    let deq = quant::dequantize(&wide, &spec, Some(Dtype::F32)).unwrap();
    let want = x.matmul(&deq.t().unwrap()).unwrap().to_vec::<f32>().unwrap();
    let g = got.to_vec::<f32>().unwrap();
    let scale = want.iter().fold(0f32, |a, v| a.max(v.abs()));
    let d = g.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(d <= 1e-5 * scale, "m{m} n{n} k{k} {bits}-bit float16 scales: {d} of {scale}");
}
