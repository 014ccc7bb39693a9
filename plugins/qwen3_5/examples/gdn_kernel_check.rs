//! Checks the qwen3_5 gated-delta scan kernel against the ops scan on the
//! GPU, with random inputs at Qwen3.5 shapes; prints max |diff| per case and
//! one PASS/FAIL line (exit code 0 / 1; 2 when MLX has no GPU backend).
//!
//! Build here:   cargo build --release -p famlx-plugin-qwen3_5 --example gdn_kernel_check
//! Run there:    source .mlx-cuda/device-env.sh && target/release/examples/gdn_kernel_check
//!
//! Inputs as the model makes them: q and k L2-normalised per head (q also
//! scaled by Dk^-1/2), decay g in (0.5, 1), beta in (0, 1), a random f32
//! initial state. Tolerance: `scan_kernel::tolerance` (f32: 1e-4 x (1 +
//! max |ref|); bf16 y: 2^-7 x (1 + max |ref|); the state is f32 in both).

use famlx_plugin_qwen3_5::gdn::{auto_path, scan, ScanPath};
use famlx_plugin_qwen3_5::scan_kernel::tolerance;
use mlx::device::{backend, default_device, Backend};
use mlx::{random, Array, Dtype, Result};
use std::process::ExitCode;
use std::time::Instant;

fn max_abs(a: &Array) -> Result<f32> {
    a.astype(Dtype::F32)?.abs()?.max_all()?.item_f32()
}

fn max_abs_diff(a: &Array, b: &Array) -> Result<f32> {
    a.astype(Dtype::F32)?.sub(&b.astype(Dtype::F32)?)?.abs()?.max_all()?.item_f32()
}

/// Mean seconds per call of `f` (after one warm-up call), evaluated each time.
fn time(mut f: impl FnMut() -> Result<(Array, Array)>) -> Result<f64> {
    let (y, s) = f()?;
    mlx::eval(&[&y, &s])?;
    let n = 10;
    let t0 = Instant::now();
    for _ in 0..n {
        let (y, s) = f()?;
        mlx::eval(&[&y, &s])?;
    }
    Ok(t0.elapsed().as_secs_f64() / n as f64)
}

struct Case {
    b: i32,
    t: i32,
    hk: i32,
    hv: i32,
    dk: i32,
    dv: i32,
}

fn inputs(c: &Case, dtype: Dtype, seed: u64) -> Result<[Array; 6]> {
    let key = random::key(seed)?;
    let keys = random::split(&key, 6)?;
    let kk = |i: i32| keys.take(&Array::i32(i), 0);
    let unit = |a: Array, scale: f64| -> Result<Array> {
        let n = a.square()?.sum(&[-1], true)?.sqrt()?;
        a.div(&n)?.mul_s(scale)?.astype(dtype)
    };
    let q =
        unit(random::normal(&[c.b, c.t, c.hk, c.dk], Dtype::F32, 0.0, 1.0, Some(&kk(0)?))?, (c.dk as f64).powf(-0.5))?;
    let k = unit(random::normal(&[c.b, c.t, c.hk, c.dk], Dtype::F32, 0.0, 1.0, Some(&kk(1)?))?, 1.0)?;
    let v = random::normal(&[c.b, c.t, c.hv, c.dv], Dtype::F32, 0.0, 1.0, Some(&kk(2)?))?.astype(dtype)?;
    let g = random::uniform(0.5, 1.0, &[c.b, c.t, c.hv], Dtype::F32, Some(&kk(3)?))?;
    let beta = random::uniform(0.0, 1.0, &[c.b, c.t, c.hv], Dtype::F32, Some(&kk(4)?))?.astype(dtype)?;
    let s0 = random::normal(&[c.b, c.hv, c.dv, c.dk], Dtype::F32, 0.0, 0.1, Some(&kk(5)?))?;
    Ok([q, k, v, g, beta, s0])
}

fn run() -> Result<bool> {
    println!("MLX backend: {}, default device: {:?}, Auto scan path: {:?}", backend(), default_device()?, auto_path());
    let cases = [
        Case { b: 1, t: 1, hk: 16, hv: 32, dk: 128, dv: 128 },
        Case { b: 1, t: 64, hk: 16, hv: 32, dk: 128, dv: 128 },
        Case { b: 1, t: 1, hk: 16, hv: 16, dk: 128, dv: 128 },
        Case { b: 2, t: 17, hk: 16, hv: 32, dk: 128, dv: 128 },
        // Odd sizes: a partly used lane group (Dk 48) and a half-empty row block (Dv 6).
        Case { b: 1, t: 5, hk: 2, hv: 4, dk: 48, dv: 6 },
    ];
    let mut ok = true;
    for c in &cases {
        for dtype in [Dtype::F32, Dtype::BF16] {
            let [q, k, v, g, beta, s0] = inputs(c, dtype, 7)?;
            let (y_ops, s_ops) = scan(ScanPath::Ops, &q, &k, &v, &g, &beta, &s0)?;
            let (y_k, s_k) = scan(ScanPath::Kernel, &q, &k, &v, &g, &beta, &s0)?;
            mlx::eval(&[&y_ops, &s_ops, &y_k, &s_k])?;
            let shapes_ok = y_k.shape() == y_ops.shape()
                && y_k.dtype() == dtype
                && s_k.shape() == s_ops.shape()
                && s_k.dtype() == Dtype::F32;
            let (dy, ds) = (max_abs_diff(&y_k, &y_ops)?, max_abs_diff(&s_k, &s_ops)?);
            let (ty, ts) = (tolerance(dtype, max_abs(&y_ops)?), tolerance(Dtype::F32, max_abs(&s_ops)?));
            let pass = shapes_ok && dy <= ty && ds <= ts && dy.is_finite() && ds.is_finite();
            ok &= pass;
            let t_ops = time(|| scan(ScanPath::Ops, &q, &k, &v, &g, &beta, &s0))?;
            let t_k = time(|| scan(ScanPath::Kernel, &q, &k, &v, &g, &beta, &s0))?;
            println!(
                "B={} T={:<2} Hk={} Hv={} Dk={} Dv={} {:<4}  max|dy| {dy:.3e} (tol {ty:.1e})  max|dstate| {ds:.3e} \
                 (tol {ts:.1e})  ops {:.3} ms  kernel {:.3} ms  {}",
                c.b,
                c.t,
                c.hk,
                c.hv,
                c.dk,
                c.dv,
                format!("{dtype:?}"),
                t_ops * 1e3,
                t_k * 1e3,
                if pass { "ok" } else { "MISMATCH" }
            );
        }
    }
    Ok(ok)
}

fn main() -> ExitCode {
    if backend() == Backend::Cpu {
        println!("FAIL: the loaded libmlx is CPU-only; run with the CUDA (or Metal) MLX library");
        return ExitCode::from(2);
    }
    match run() {
        Ok(true) => {
            println!("PASS: gated-delta scan kernel matches the ops scan");
            ExitCode::SUCCESS
        }
        Ok(false) => {
            println!("FAIL: gated-delta scan kernel differs from the ops scan (see MISMATCH lines)");
            ExitCode::from(1)
        }
        Err(e) => {
            println!("FAIL: {}", e.msg);
            ExitCode::from(1)
        }
    }
}
