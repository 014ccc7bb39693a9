//! The delta-rule scan as one custom GPU kernel (CUDA and Metal sources,
//! the one matching the backend MLX reports is compiled at run time).
//!
//! Layout of the work: one warp / SIMD group of 32 threads per state row
//! `(b, hv, dv)`. Each lane keeps `ceil(Dk / 32)` of the row's `Dk` f32
//! state entries in registers (lane `l` owns entries `l, l + 32, ...`, so
//! loads of q/k are coalesced), and the loop over time runs inside the
//! kernel: per step the row decays by `g`, `k·s` and `q·s` are two warp
//! reductions, and lane 0 writes `y`. Blocks are 32 x 4 threads (four rows);
//! the grid is `[32, Dv, B * Hv]` threads (MLX's convention: total threads,
//! rounded up to whole blocks). The state stays float32 throughout, as in
//! the ops path; inputs may be bf16/f16/f32 and are widened to f32.

use mlx::kernel::{Kernel, KernelSource, Launch, TemplateArg};
use mlx::{Array, Dtype, Error, Result};

const CUDA_HEADER: &str = r#"
__device__ __forceinline__ float famlx_gdn_warp_sum(float x) {
    for (int o = 16; o > 0; o >>= 1) {
        x += __shfl_xor_sync(0xffffffffu, x, o);
    }
    return x;
}
"#;

// MLX generates the signature: `const <type>* q, k, v, g, beta, state_in,
// tlen` and `<type>* y`, `float* state_out`; template arguments become
// `constexpr int Dk = ...;` / `using InT = ...;`. Offsets are `long long`
// (a builtin, so no header is needed under NVRTC).
const CUDA_BODY: &str = r#"
    const int lane = threadIdx.x;
    const int dv = blockIdx.y * blockDim.y + threadIdx.y;
    const int n = blockIdx.z;
    if (dv >= Dv) {
        return; // a whole warp: the shuffles below see only full warps
    }
    const int b = n / Hv;
    const int hv = n % Hv;
    const int hk = hv / (Hv / Hk);
    const int T = static_cast<int>(tlen[0]);
    constexpr int PER = (Dk + 31) / 32;
    float s[PER];
    const long long row = (static_cast<long long>(n) * Dv + dv) * Dk;
#pragma unroll
    for (int j = 0; j < PER; ++j) {
        const int i = lane + 32 * j;
        s[j] = i < Dk ? static_cast<float>(state_in[row + i]) : 0.0f;
    }
    for (int t = 0; t < T; ++t) {
        const long long qk = ((static_cast<long long>(b) * T + t) * Hk + hk) * Dk;
        const long long gv = (static_cast<long long>(b) * T + t) * Hv + hv;
        const float gt = static_cast<float>(g[gv]);
        const float bt = static_cast<float>(beta[gv]);
        float kv = 0.0f;
#pragma unroll
        for (int j = 0; j < PER; ++j) {
            const int i = lane + 32 * j;
            if (i < Dk) {
                s[j] *= gt;
                kv += s[j] * static_cast<float>(k[qk + i]);
            }
        }
        kv = famlx_gdn_warp_sum(kv);
        const float delta = (static_cast<float>(v[gv * Dv + dv]) - kv) * bt;
        float out = 0.0f;
#pragma unroll
        for (int j = 0; j < PER; ++j) {
            const int i = lane + 32 * j;
            if (i < Dk) {
                s[j] += static_cast<float>(k[qk + i]) * delta;
                out += s[j] * static_cast<float>(q[qk + i]);
            }
        }
        out = famlx_gdn_warp_sum(out);
        if (lane == 0) {
            y[gv * Dv + dv] = static_cast<InT>(out);
        }
    }
#pragma unroll
    for (int j = 0; j < PER; ++j) {
        const int i = lane + 32 * j;
        if (i < Dk) {
            state_out[row + i] = s[j];
        }
    }
"#;

// The same for `mx.fast.metal_kernel`: inputs are `const device <type>*`,
// threadgroups of 32 x 4 make each SIMD group (32 lanes on Apple GPUs) one
// state row, and `simd_sum` is the reduction.
const METAL_BODY: &str = r#"
    const uint lane = thread_position_in_threadgroup.x;
    const uint dv = thread_position_in_grid.y;
    const uint n = thread_position_in_grid.z;
    if (dv >= uint(Dv)) {
        return;
    }
    const uint b = n / Hv;
    const uint hv = n % Hv;
    const uint hk = hv / (Hv / Hk);
    const int T = int(tlen[0]);
    constexpr int PER = (Dk + 31) / 32;
    float s[PER];
    const size_t row = (size_t(n) * Dv + dv) * Dk;
    for (int j = 0; j < PER; ++j) {
        const uint i = lane + 32 * j;
        s[j] = i < uint(Dk) ? static_cast<float>(state_in[row + i]) : 0.0f;
    }
    for (int t = 0; t < T; ++t) {
        const size_t qk = ((size_t(b) * T + t) * Hk + hk) * Dk;
        const size_t gv = (size_t(b) * T + t) * Hv + hv;
        const float gt = static_cast<float>(g[gv]);
        const float bt = static_cast<float>(beta[gv]);
        float kv = 0.0f;
        for (int j = 0; j < PER; ++j) {
            const uint i = lane + 32 * j;
            if (i < uint(Dk)) {
                s[j] *= gt;
                kv += s[j] * static_cast<float>(k[qk + i]);
            }
        }
        kv = simd_sum(kv);
        const float delta = (static_cast<float>(v[gv * Dv + dv]) - kv) * bt;
        float out = 0.0f;
        for (int j = 0; j < PER; ++j) {
            const uint i = lane + 32 * j;
            if (i < uint(Dk)) {
                s[j] += static_cast<float>(k[qk + i]) * delta;
                out += s[j] * static_cast<float>(q[qk + i]);
            }
        }
        out = simd_sum(out);
        if (lane == 0) {
            y[gv * Dv + dv] = static_cast<InT>(out);
        }
    }
    for (int j = 0; j < PER; ++j) {
        const uint i = lane + 32 * j;
        if (i < uint(Dk)) {
            state_out[row + i] = s[j];
        }
    }
"#;

fn source() -> KernelSource {
    KernelSource { metal: Some(METAL_BODY.into()), cuda: Some(CUDA_BODY.into()), header: CUDA_HEADER.into() }
}

/// Whether the live backend can run the kernel (CUDA or Metal).
pub fn available() -> bool {
    Kernel::available(&source())
}

thread_local! {
    // Built once per thread; leaked so no MLX object is dropped during
    // process exit (after MLX's own statics may be gone).
    static KERNEL: &'static std::result::Result<Kernel, String> = Box::leak(Box::new(build()));
}

fn build() -> std::result::Result<Kernel, String> {
    let src = KernelSource {
        // The header is CUDA code; Metal gets none.
        header: if mlx::device::backend() == mlx::device::Backend::Cuda { CUDA_HEADER.into() } else { String::new() },
        ..source()
    };
    Kernel::new(
        "famlx_gated_delta_scan",
        &["q", "k", "v", "g", "beta", "state_in", "tlen"],
        &["y", "state_out"],
        &src,
        0,
    )
    .map_err(|e| e.msg)
}

/// The delta-rule scan on the GPU (same contract as
/// [`crate::gdn::scan_ops`]): `q`, `k` `[B, T, Hk, Dk]`, `v` `[B, T, Hv,
/// Dv]`, `g`, `beta` `[B, T, Hv]`, `state` `[B, Hv, Dv, Dk]` float32 →
/// (`y` `[B, T, Hv, Dv]` in q's dtype, the new float32 state).
pub fn scan_kernel(q: &Array, k: &Array, v: &Array, g: &Array, beta: &Array, state: &Array) -> Result<(Array, Array)> {
    let (b, t, hk, dk) = (q.dim(0), q.dim(1), q.dim(2), q.dim(3));
    let (hv, dv) = (v.dim(2), v.dim(3));
    let shape_ok = q.ndim() == 4
        && k.shape() == q.shape()
        && v.ndim() == 4
        && v.dim(0) == b
        && v.dim(1) == t
        && g.shape() == [b, t, hv]
        && beta.shape() == [b, t, hv]
        && state.shape() == [b, hv, dv, dk]
        && hk > 0
        && hv % hk == 0;
    if !shape_ok {
        return Err(Error::msg(format!(
            "gated delta scan kernel: shapes q {:?} k {:?} v {:?} g {:?} beta {:?} state {:?} do not fit \
             [B,T,Hk,Dk], [B,T,Hv,Dv], [B,T,Hv], [B,Hv,Dv,Dk] with Hv a multiple of Hk",
            q.shape(),
            k.shape(),
            v.shape(),
            g.shape(),
            beta.shape(),
            state.shape()
        )));
    }
    let state = if state.dtype() == Dtype::F32 { state.clone() } else { state.astype(Dtype::F32)? };
    let tlen = Array::from_slice(&[t], &[1])?;
    KERNEL.with(|k_| -> Result<(Array, Array)> {
        let kern = k_.as_ref().map_err(|e| Error::msg(e.clone()))?;
        let y_shape = [b, t, hv, dv];
        let s_shape = [b, hv, dv, dk];
        let outs = kern.call(&Launch {
            inputs: &[q, k, v, g, beta, &state, &tlen],
            outputs: &[(&y_shape, q.dtype()), (&s_shape, Dtype::F32)],
            grid: [32, dv, b * hv],
            block: [32, 4, 1],
            template: &[
                ("InT", TemplateArg::Dtype(q.dtype())),
                ("Dk", TemplateArg::Int(dk)),
                ("Dv", TemplateArg::Int(dv)),
                ("Hk", TemplateArg::Int(hk)),
                ("Hv", TemplateArg::Int(hv)),
            ],
            init_value: None,
        })?;
        let mut it = outs.into_iter();
        match (it.next(), it.next()) {
            (Some(y), Some(s)) => Ok((y, s)),
            _ => Err(Error::msg("gated delta scan kernel: expected two outputs")),
        }
    })
}

/// The bound a kernel result must meet against the ops scan:
/// `max |kernel - ops| <= tolerance(dtype, max |ops|)`.
///
/// Both paths compute in float32 and differ only in summation order (a
/// 32-lane tree vs MLX's reduction over `Dk`), about 1e-6 relative per
/// step, growing slowly through the state over time: allow 1e-4 relative
/// (to `1 + max |ref|`). A bf16 (or f16) `y` is rounded from those f32
/// values, so one ulp flips where they straddle a rounding boundary:
/// `2^-7` relative for bf16, `2^-10` for f16.
pub fn tolerance(dtype: Dtype, max_ref: f32) -> f32 {
    let rel = match dtype {
        Dtype::BF16 => 1.0 / 128.0,
        Dtype::F16 => 1.0 / 1024.0,
        _ => 1e-4,
    };
    rel * (1.0 + max_ref)
}
