//! famlx's half-precision matmul on CPU streams (x @ W.T in float16 and
//! bfloat16) is bit-equal to MLX's own CPU kernel: each case is evaluated
//! with the primitive and with it switched off (FAMLX_CPU_MATMUL=mlx, read
//! per call), and every output bit compared. Covers one to three rows (the
//! transposed-block path), four and more (dequantized panels), dimensions
//! that are not multiples of 16, batched x, and a b that is not a
//! transposed view (copied).

mod common;

use mlx::{random, Array, Dtype};

fn normal(shape: &[i32], dtype: Dtype) -> Array {
    let a = random::normal(shape, Dtype::F32, 0.0, 1.0, None).unwrap().astype(dtype).unwrap();
    mlx::eval(&[&a]).unwrap();
    a
}

fn check(x: &Array, b: &Array, what: &str) {
    let ours = common::on_cpu() && common::avx512();
    common::same_bits_as_mlx("FAMLX_CPU_MATMUL", "FamlxCpuHalfMatmul", ours, what, || x.matmul(b).unwrap());
}

#[test]
fn half_matmul_is_bit_equal_to_mlx() {
    for dtype in [Dtype::BF16, Dtype::F16] {
        for (m, n, k) in
            [(1, 300, 512), (2, 37, 100), (3, 16, 16), (1, 5, 7), (4, 40, 96), (13, 33, 129), (128, 64, 512)]
        {
            let x = normal(&[m, k], dtype);
            let w = normal(&[n, k], dtype);
            check(&x, &w.t().unwrap(), &format!("{dtype:?} m{m} n{n} k{k}"));
        }
        // Batched x, as a linear layer sees it.
        let x = normal(&[1, 7, 64], dtype);
        let w = normal(&[48, 64], dtype);
        check(&x, &w.t().unwrap(), &format!("{dtype:?} batched"));
        // W.T with a leading axis (famlx's linear layers pass it so).
        check(&x, &w.t().unwrap().expand_dims(&[0]).unwrap(), &format!("{dtype:?} batched, 3-d b"));
        check(&normal(&[7, 64], dtype), &w.t().unwrap().expand_dims(&[0]).unwrap(), &format!("{dtype:?} 2-d x, 3-d b"));
        // b stored [K, N] (not a transposed view).
        let x = normal(&[5, 40], dtype);
        let b = normal(&[40, 24], dtype);
        check(&x, &b, &format!("{dtype:?} plain b"));
    }
}
