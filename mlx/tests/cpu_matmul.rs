//! famlx's half-precision matmul on CPU streams (x @ W.T in float16 and
//! bfloat16) is bit-equal to MLX's own CPU kernel: each case is evaluated
//! with the primitive and with it switched off (FAMLX_CPU_MATMUL=mlx, read
//! per call), and every output bit compared. Covers one to three rows (the
//! transposed-block path), four and more (dequantized panels), dimensions
//! that are not multiples of 16, batched x, and a b that is not a
//! transposed view (copied).

use mlx::{random, Array, Dtype};

fn normal(shape: &[i32], dtype: Dtype) -> Array {
    let a = random::normal(shape, Dtype::F32, 0.0, 1.0, None).unwrap().astype(dtype).unwrap();
    mlx::eval(&[&a]).unwrap();
    a
}

fn expect_ours() -> bool {
    let cpu = mlx::device::default_device().unwrap().0 == mlx::device::DeviceType::Cpu;
    #[cfg(target_arch = "x86_64")]
    let avx512 = is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw");
    #[cfg(not(target_arch = "x86_64"))]
    let avx512 = false;
    cpu && avx512
}

fn check(x: &Array, b: &Array, what: &str) {
    std::env::remove_var("FAMLX_CPU_MATMUL");
    let ours = x.matmul(b).unwrap();
    let census = mlx::graph_census(&[&ours]).unwrap();
    let used = census.iter().any(|(n, _)| n == "FamlxCpuHalfMatmul");
    assert_eq!(used, expect_ours(), "{what}: {census:?}");
    std::env::set_var("FAMLX_CPU_MATMUL", "mlx");
    let theirs = x.matmul(b).unwrap();
    std::env::remove_var("FAMLX_CPU_MATMUL");
    assert_eq!(ours.shape(), theirs.shape(), "{what}");
    assert_eq!(ours.dtype(), theirs.dtype(), "{what}");
    let f32s = |a: &Array| a.astype(Dtype::F32).unwrap().to_vec::<f32>().unwrap();
    let (a, b) = (f32s(&ours), f32s(&theirs));
    let differ = a.iter().zip(&b).filter(|(x, y)| x.to_bits() != y.to_bits()).count();
    assert_eq!(differ, 0, "{what}: {differ} of {} values differ", a.len());
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
