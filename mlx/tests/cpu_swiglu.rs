//! famlx's SwiGLU primitive on CPU streams gives the bits of MLX's compiled
//! kernel for `silu(gate) * up` (what `nn::swiglu` compiles elsewhere), in
//! float32, bfloat16 and float16, for contiguous operands and for the two
//! halves of a fused gate/up projection (strided views).

mod common;

use mlx::nn::swiglu;
use mlx::{random, Array, Dtype};

fn check(gate: &Array, up: &Array, what: &str) {
    common::same_bits_as_mlx("FAMLX_CPU_SWIGLU", "FamlxCpuSwiglu", common::on_cpu(), what, || {
        swiglu(gate, up).unwrap()
    });
}

#[test]
fn swiglu_is_bit_equal_to_the_compiled_kernel() {
    for dtype in [Dtype::F32, Dtype::BF16, Dtype::F16] {
        let n = |s: &[i32]| {
            let a = random::normal(s, Dtype::F32, 0.0, 4.0, None).unwrap().astype(dtype).unwrap();
            mlx::eval(&[&a]).unwrap();
            a
        };
        check(&n(&[1, 5, 300]), &n(&[1, 5, 300]), &format!("{dtype:?} contiguous"));
        let fused = n(&[1, 3, 2 * 176]);
        let gate = fused.slice(&[0, 0, 0], &[1, 3, 176], &[1, 1, 1]).unwrap();
        let up = fused.slice(&[0, 0, 176], &[1, 3, 352], &[1, 1, 1]).unwrap();
        check(&gate, &up, &format!("{dtype:?} halves of a fused projection"));
    }
}
