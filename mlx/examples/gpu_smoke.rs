//! GPU smoke test for famlx's MLX bindings.
//!
//! Prints the MLX runtime version, the backend and the default device, checks
//! a 4-bit quantized matmul against dequantize + matmul, and runs a custom
//! kernel (`y = 2 x + 1`, CUDA or Metal source by backend) through
//! [`mlx::kernel::Kernel`]. Exits non-zero on any mismatch or error.
//!
//! ```text
//! cargo run -p famlx-mlx --release --example gpu_smoke            # GPU machine
//! cargo run -p famlx-mlx --release --example gpu_smoke -- --allow-cpu
//! ```
//!
//! On CPU-only MLX the kernel step cannot run: without `--allow-cpu` that is
//! a failure (exit 3), since this is meant to exercise a GPU backend.

use mlx::device::{self, Backend};
use mlx::kernel::{Kernel, KernelSource, Launch, TemplateArg};
use mlx::quant::{self, QuantSpec};
use mlx::{random, Array, Dtype, Result};
use std::process::ExitCode;

/// CUDA body, following `mx.fast.cuda_kernel`'s conventions: MLX generates
/// the signature (`const T* x`, `T* y`), declares template arguments as
/// `using T = ...;` / `constexpr int N = ...;`, and aliases
/// `cg = cooperative_groups`. The grid is rounded up to whole blocks, so the
/// body checks the bound.
const CUDA_BODY: &str = r#"
    auto i = cg::this_grid().thread_rank();
    if (i < N) {
        y[i] = static_cast<T>(2.0f * static_cast<float>(x[i]) + 1.0f);
    }
"#;

/// The same kernel for `mx.fast.metal_kernel`.
const METAL_BODY: &str = r#"
    uint i = thread_position_in_grid.x;
    if (i < N) {
        y[i] = static_cast<T>(2.0f * static_cast<float>(x[i]) + 1.0f);
    }
"#;

/// Largest |a - b| over two arrays of the same shape.
fn max_abs_diff(a: &Array, b: &Array) -> Result<f32> {
    a.astype(Dtype::F32)?.sub(&b.astype(Dtype::F32)?)?.abs()?.max_all()?.item_f32()
}

fn check(name: &str, diff: f32, tol: f32, failures: &mut u32) {
    let ok = diff <= tol;
    println!("{:<34} max |diff| = {diff:.3e} (tol {tol:.0e})  {}", name, if ok { "OK" } else { "MISMATCH" });
    if !ok {
        *failures += 1;
    }
}

fn quantized_matmul(failures: &mut u32) -> Result<()> {
    let key = random::key(0)?;
    let keys = random::split(&key, 2)?;
    let (k1, k2) = (keys.take(&Array::i32(0), 0)?, keys.take(&Array::i32(1), 0)?);
    let w = random::normal(&[256, 512], Dtype::F32, 0.0, 0.05, Some(&k1))?;
    let x = random::normal(&[4, 512], Dtype::F32, 0.0, 1.0, Some(&k2))?;
    for (bits, group) in [(4, 64), (8, 64)] {
        let spec = QuantSpec::affine(group, bits);
        let q = quant::quantize(&w, &spec)?;
        let fast = quant::quantized_matmul(&x, &q, &spec, true)?;
        let reference = x.matmul(&quant::dequantize(&q, &spec, None)?.t()?)?;
        mlx::eval(&[&fast, &reference])?;
        // The reference f32 GEMM runs in TF32 on CUDA (10-bit mantissa): outputs of
        // magnitude ~1 agree to a few 1e-3, not to f32 precision.
        check(&format!("quantized_matmul q{bits} g{group} f32"), max_abs_diff(&fast, &reference)?, 5e-3, failures);
        // bf16 activations and scales, as models run on the GPU.
        let wb = w.astype(Dtype::BF16)?;
        let xb = x.astype(Dtype::BF16)?;
        let qb = quant::quantize(&wb, &spec)?;
        let fast = quant::quantized_matmul(&xb, &qb, &spec, true)?;
        // Reference in f32 from the same (bf16) inputs and quantized weights,
        // compared relative to the output's scale. MLX's CPU kernel sums in
        // bf16 (about 3% off here, same in Python); the GPU sums in f32. A
        // wrong layout or scale would be off by ~100%.
        let deq = quant::dequantize(&qb, &spec, Some(Dtype::F32))?;
        let reference = xb.astype(Dtype::F32)?.matmul(&deq.t()?)?;
        let scale = reference.astype(Dtype::F32)?.abs()?.max_all()?.item_f32()?;
        check(
            &format!("quantized_matmul q{bits} g{group} bf16 (rel)"),
            max_abs_diff(&fast, &reference)? / scale,
            5e-2,
            failures,
        );
    }
    Ok(())
}

fn custom_kernel(failures: &mut u32) -> Result<()> {
    let src = KernelSource { cuda: Some(CUDA_BODY.into()), metal: Some(METAL_BODY.into()), header: String::new() };
    let kernel = Kernel::new("famlx_affine", &["x"], &["y"], &src, 0)?;
    let n = 1000; // not a multiple of the block: exercises the bound check
    for dtype in [Dtype::F32, Dtype::BF16] {
        let x = mlx::arange(0.0, n as f64, 1.0, Dtype::F32)?.mul_s(0.01)?.sub_s(3.0)?.astype(dtype)?;
        let out = kernel.call(&Launch {
            inputs: &[&x],
            outputs: &[(&[n], dtype)],
            grid: [n, 1, 1],
            block: [256, 1, 1],
            template: &[("T", TemplateArg::Dtype(dtype)), ("N", TemplateArg::Int(n))],
            init_value: None,
        })?;
        let want = x.mul_s(2.0)?.add_s(1.0)?;
        let tol = if dtype == Dtype::F32 { 1e-6 } else { 0.05 };
        check(&format!("custom kernel y = 2x + 1 ({dtype})"), max_abs_diff(&out[0], &want)?, tol, failures);
    }
    Ok(())
}

fn main() -> ExitCode {
    let allow_cpu = std::env::args().any(|a| a == "--allow-cpu");
    println!("MLX runtime {} (built against {})", mlx::runtime_version(), mlx::build_version());
    if let Err(e) = mlx::check_runtime() {
        println!("WARNING: {e}");
    }
    let backend = device::backend();
    println!("backend: {backend}");
    match device::default_device() {
        Ok((t, i)) => println!("default device: {t:?}:{i}"),
        Err(e) => {
            println!("default device: error: {e}");
            return ExitCode::from(1);
        }
    }
    println!("GPU available: {}", device::is_available(device::DeviceType::Gpu));

    let mut failures = 0;
    if let Err(e) = quantized_matmul(&mut failures) {
        println!("quantized matmul: error: {e}");
        failures += 1;
    }
    let mut cpu_only = false;
    match custom_kernel(&mut failures) {
        Ok(()) => {}
        Err(e) if backend == Backend::Cpu => {
            println!("custom kernel: not run: {e}");
            cpu_only = true;
        }
        Err(e) => {
            println!("custom kernel: error: {e}");
            failures += 1;
        }
    }
    if let Err(e) = mlx::synchronize() {
        println!("synchronize: error: {e}");
        failures += 1;
    }
    println!("peak memory: {:.1} MiB", mlx::memory::peak() as f64 / (1 << 20) as f64);
    if failures > 0 {
        println!("FAILED: {failures} check(s)");
        return ExitCode::from(1);
    }
    if cpu_only && !allow_cpu {
        println!("FAILED: the loaded libmlx has no GPU backend (pass --allow-cpu to accept)");
        return ExitCode::from(3);
    }
    println!("all checks passed");
    ExitCode::SUCCESS
}
