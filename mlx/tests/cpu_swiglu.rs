//! famlx's SwiGLU primitive on CPU streams gives the bits of MLX's compiled
//! kernel for `silu(gate) * up` (what `nn::swiglu` compiles elsewhere), in
//! float32, bfloat16 and float16, for contiguous operands and for the two
//! halves of a fused gate/up projection (strided views).

use mlx::nn::swiglu;
use mlx::{random, Array, Dtype};

fn check(gate: &Array, up: &Array, what: &str) {
    std::env::remove_var("FAMLX_CPU_SWIGLU");
    let ours = swiglu(gate, up).unwrap();
    let census = mlx::graph_census(&[&ours]).unwrap();
    let on_cpu = mlx::device::default_device().unwrap().0 == mlx::device::DeviceType::Cpu;
    assert_eq!(census.iter().any(|(n, _)| n == "FamlxCpuSwiglu"), on_cpu, "{what}: {census:?}");
    std::env::set_var("FAMLX_CPU_SWIGLU", "mlx");
    let theirs = swiglu(gate, up).unwrap();
    std::env::remove_var("FAMLX_CPU_SWIGLU");
    let census = mlx::graph_census(&[&theirs]).unwrap();
    assert!(!census.iter().any(|(n, _)| n == "FamlxCpuSwiglu"), "{what}: still ours with the switch off");
    assert_eq!(ours.dtype(), theirs.dtype(), "{what}");
    let f32s = |a: &Array| a.astype(Dtype::F32).unwrap().to_vec::<f32>().unwrap();
    let (a, b) = (f32s(&ours), f32s(&theirs));
    let differ = a.iter().zip(&b).filter(|(x, y)| x.to_bits() != y.to_bits()).count();
    assert_eq!(differ, 0, "{what}: {differ} of {} values differ", a.len());
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
