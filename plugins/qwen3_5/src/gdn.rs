//! The gated delta net: Qwen3.5's linear-attention mixer, with its causal
//! depthwise convolution and delta-rule recurrence kept in a recurrent cache
//! slot (`[conv_state, delta_state]`).

use mlx::nn::{HeadShare, Kind, Linear, Parallel, Split, Weights};
use mlx::{Array, Dtype, Result};
use plugin_api::Caches;
use std::sync::atomic::{AtomicU8, Ordering};

/// Which implementation of the delta-rule scan to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanPath {
    /// Chosen per call from the backend MLX reports ([`auto_path`]).
    Auto,
    /// Plain MLX ops, a loop over time: works on every backend.
    Ops,
    /// MLX's fused op only (errors where the backend lacks it).
    Fast,
    /// This crate's custom kernel ([`crate::scan_kernel`]): CUDA or Metal
    /// source, whichever the backend is (errors on CPU-only MLX).
    Kernel,
}

// 0 = not yet known, 1 = the fused op works, 2 = it does not.
static FAST_WORKS: AtomicU8 = AtomicU8::new(0);

/// What [`ScanPath::Auto`] runs now: with a GPU default device, the custom
/// kernel on CUDA (MLX 0.32.4's CUDA backend has no `gated_delta_update`)
/// and MLX's own fused op on Metal (our Metal kernel where that op fails);
/// on the CPU the ops scan, which is what mlx-lm runs there (MLX's fused
/// CPU op rounds bf16 inputs differently, ~1e-3). `FAMLX_GDN_SCAN=ops|fast|kernel`
/// overrides the choice (for A/B runs on a GPU).
pub fn auto_path() -> ScanPath {
    use mlx::device::{backend, default_device, Backend, DeviceType};
    static FORCED: std::sync::OnceLock<Option<ScanPath>> = std::sync::OnceLock::new();
    let forced = FORCED.get_or_init(|| match std::env::var("FAMLX_GDN_SCAN").as_deref() {
        Ok("ops") => Some(ScanPath::Ops),
        Ok("fast") => Some(ScanPath::Fast),
        Ok("kernel") => Some(ScanPath::Kernel),
        Ok("") | Ok("auto") | Err(_) => None,
        Ok(other) => {
            eprintln!(
                "famlx: warning: FAMLX_GDN_SCAN={other:?} is not one of ops, fast, kernel, auto; choosing by backend"
            );
            None
        }
    });
    if let Some(p) = forced {
        return *p;
    }
    if !matches!(default_device(), Ok((DeviceType::Gpu, _))) {
        return ScanPath::Ops;
    }
    match backend() {
        Backend::Cuda => ScanPath::Kernel,
        Backend::Metal if FAST_WORKS.load(Ordering::Relaxed) == 2 => ScanPath::Kernel,
        Backend::Metal => ScanPath::Fast,
        Backend::Cpu => ScanPath::Ops,
    }
}

/// One step of the delta rule on `[B, H, ...]` slices (q, k already repeated to H heads).
fn step(q: &Array, k: &Array, v: &Array, g: &Array, beta: &Array, state: &Array) -> Result<(Array, Array)> {
    // state [B, H, Dv, Dk]; q, k [B, H, Dk]; v [B, H, Dv]; g, beta [B, H]
    let state = state.mul(&g.expand_dims(&[-1, -2])?)?;
    let k_row = k.expand_dims(&[-2])?;
    let kv_mem = state.mul(&k_row)?.sum(&[-1], false)?;
    let delta = v.sub(&kv_mem)?.mul(&beta.expand_dims(&[-1])?)?;
    let state = state.add(&k_row.mul(&delta.expand_dims(&[-1])?)?)?;
    let y = state.mul(&q.expand_dims(&[-2])?)?.sum(&[-1], false)?;
    Ok((y.astype(q.dtype())?, state))
}

/// The delta-rule scan in plain ops: `q`, `k` `[B, T, Hk, Dk]`, `v`
/// `[B, T, Hv, Dv]`, `g`, `beta` `[B, T, Hv]`, `state` `[B, Hv, Dv, Dk]`
/// (float32). Returns `y` `[B, T, Hv, Dv]` (q's dtype) and the new state.
pub fn scan_ops(q: &Array, k: &Array, v: &Array, g: &Array, beta: &Array, state: &Array) -> Result<(Array, Array)> {
    let (t_len, hk, hv) = (q.dim(1), q.dim(2), v.dim(2));
    let (q, k) = if hv / hk > 1 { (q.repeat(hv / hk, -2)?, k.repeat(hv / hk, -2)?) } else { (q.clone(), k.clone()) };
    let mut state = state.clone();
    let mut ys = Vec::with_capacity(t_len as usize);
    for t in 0..t_len {
        let at = |a: &Array| -> Result<Array> { a.slice_axis(1, t, t + 1)?.squeeze(&[1]) };
        let (y, s) = step(&at(&q)?, &at(&k)?, &at(v)?, &at(g)?, &at(beta)?, &state)?;
        state = s;
        ys.push(y);
    }
    let refs: Vec<&Array> = ys.iter().collect();
    Ok((mlx::stack(&refs, 1)?, state))
}

/// The delta-rule scan along `path` (same shapes as [`scan_ops`]).
pub fn scan(
    path: ScanPath,
    q: &Array,
    k: &Array,
    v: &Array,
    g: &Array,
    beta: &Array,
    state: &Array,
) -> Result<(Array, Array)> {
    match path {
        ScanPath::Ops => scan_ops(q, k, v, g, beta, state),
        ScanPath::Fast => mlx::fast::gated_delta_update(q, k, v, g, beta, Some(state), None),
        ScanPath::Kernel => crate::scan_kernel::scan_kernel(q, k, v, g, beta, state),
        ScanPath::Auto => match auto_path() {
            ScanPath::Fast => match mlx::fast::gated_delta_update(q, k, v, g, beta, Some(state), None) {
                Ok(r) => {
                    FAST_WORKS.store(1, Ordering::Relaxed);
                    Ok(r)
                }
                // "Not implemented here" is remembered (later calls go
                // straight to the kernel); shape errors would come back
                // from the kernel too.
                Err(_) => {
                    FAST_WORKS.store(2, Ordering::Relaxed);
                    crate::scan_kernel::scan_kernel(q, k, v, g, beta, state)
                }
            },
            ScanPath::Kernel => crate::scan_kernel::scan_kernel(q, k, v, g, beta, state),
            _ => scan_ops(q, k, v, g, beta, state),
        },
    }
}

/// Shapes of a gated delta net layer.
#[derive(Debug, Clone, Copy)]
pub struct GdnDims {
    /// key heads
    pub k_heads: i32,
    /// value heads (a multiple of `k_heads`)
    pub v_heads: i32,
    /// key head dim
    pub k_dim: i32,
    /// value head dim
    pub v_dim: i32,
    /// causal conv kernel width
    pub conv_kernel: i32,
}

impl GdnDims {
    /// Width of the keys (and queries), all heads.
    pub fn key_dim(&self) -> i32 {
        self.k_heads * self.k_dim
    }
    /// Width of the values, all heads.
    pub fn value_dim(&self) -> i32 {
        self.v_heads * self.v_dim
    }
    /// Channels of the convolution (q, k and v side by side).
    pub fn conv_dim(&self) -> i32 {
        2 * self.key_dim() + self.value_dim()
    }
}

/// A gated delta net layer.
#[derive(Debug, Clone)]
pub struct GatedDeltaNet {
    in_qkv: Linear,
    in_z: Linear,
    in_b: Linear,
    in_a: Linear,
    /// depthwise conv weight `[C, K, 1]` (MLX layout)
    conv_w: Array,
    dt_bias: Array,
    /// `-exp(A_log)` in float32
    neg_a: Array,
    norm_w: Array,
    out: Linear,
    dims: GdnDims,
    eps: f32,
    /// Which scan implementation to run.
    pub path: ScanPath,
}

impl GatedDeltaNet {
    /// Loads `{prefix}.{in_proj_qkv,in_proj_z,in_proj_b,in_proj_a,conv1d,dt_bias,A_log,norm,out_proj}`
    /// of a layer over a `hidden`-wide residual stream.
    pub fn load(w: &dyn Weights, prefix: &str, hidden: i32, dims: GdnDims, eps: f32) -> Result<Self> {
        // Tensor parallel: each rank holds a share of the value heads and
        // the key heads they read, where they split over the ranks (and on
        // out_proj's quantization groups); else the layer stays whole.
        let group = w.quant(&format!("{prefix}.out_proj")).map(|q| q.group_size);
        let share = Parallel::tensor(w.parallel())
            .and_then(|p| HeadShare::split(&p, dims.v_heads, dims.k_heads, dims.v_dim, group));
        if let Some(share) = share {
            return Self::load_share(w, prefix, hidden, dims, eps, share);
        }
        let l = |n: &str, i: i32, o: i32| Linear::load(w, &format!("{prefix}.{n}"), i, o);
        let t = |n: &str, shape: &[i32]| w.tensor(&format!("{prefix}.{n}"), shape, Kind::Float);
        let (c, vh) = (dims.conv_dim(), dims.v_heads);
        let a_log = t("A_log", &[vh])?;
        Ok(GatedDeltaNet {
            in_qkv: l("in_proj_qkv", hidden, c)?,
            in_z: l("in_proj_z", hidden, dims.value_dim())?,
            in_b: l("in_proj_b", hidden, vh)?,
            in_a: l("in_proj_a", hidden, vh)?,
            conv_w: t("conv1d.weight", &[c, dims.conv_kernel, 1])?,
            dt_bias: t("dt_bias", &[vh])?,
            neg_a: a_log.astype(Dtype::F32)?.exp()?.neg()?,
            norm_w: t("norm.weight", &[dims.v_dim])?,
            out: l("out_proj", dims.value_dim(), hidden)?,
            dims,
            eps,
            path: ScanPath::Auto,
        })
    }

    /// This rank's heads of a tensor-parallel split: the q/k/v channels,
    /// z rows, decay and gate entries and convolution channels of its
    /// heads, and the `out_proj` columns they feed (summed over the group).
    /// Every head's recurrence is its own, so the split is exact.
    fn load_share(
        w: &dyn Weights,
        prefix: &str,
        hidden: i32,
        dims: GdnDims,
        eps: f32,
        share: HeadShare,
    ) -> Result<Self> {
        let d = dims;
        let ((va, vb), (ka, kb)) = (share.q, share.kv);
        let (kd, vd) = (d.k_dim, d.v_dim);
        let key = d.key_dim();
        let channels = vec![(ka * kd, kb * kd), (key + ka * kd, key + kb * kd), (2 * key + va * vd, 2 * key + vb * vd)];
        let split =
            |n: &str, i: i32, o: i32, s: Split| Linear::load_split(w, &format!("{prefix}.{n}"), i, o, false, &s);
        let t = |n: &str, shape: &[i32]| w.tensor(&format!("{prefix}.{n}"), shape, Kind::Float);
        // Checked whole, then only the rows of this rank's heads read.
        let rows = |n: &str, shape: &[i32], ranges: &[(i32, i32)]| -> Result<Array> {
            t(n, shape)?;
            w.runs(&format!("{prefix}.{n}"), 0, ranges)
        };
        let (c, vh) = (d.conv_dim(), d.v_heads);
        let a_log = rows("A_log", &[vh], &[(va, vb)])?;
        let local = GdnDims { k_heads: kb - ka, v_heads: vb - va, ..d };
        Ok(GatedDeltaNet {
            in_qkv: split("in_proj_qkv", hidden, c, Split::Rows(channels.clone()))?,
            in_z: split("in_proj_z", hidden, d.value_dim(), Split::Rows(vec![(va * vd, vb * vd)]))?,
            in_b: split("in_proj_b", hidden, vh, Split::Rows(vec![(va, vb)]))?,
            in_a: split("in_proj_a", hidden, vh, Split::Rows(vec![(va, vb)]))?,
            conv_w: rows("conv1d.weight", &[c, d.conv_kernel, 1], &channels)?,
            dt_bias: rows("dt_bias", &[vh], &[(va, vb)])?,
            neg_a: a_log.astype(Dtype::F32)?.exp()?.neg()?,
            norm_w: t("norm.weight", &[d.v_dim])?,
            out: split("out_proj", d.value_dim(), hidden, Split::Cols(va * vd, vb * vd))?,
            dims: local,
            eps,
            path: ScanPath::Auto,
        })
    }

    /// `x` is `[B, S, hidden]`; reads and replaces the state in cache `slot`.
    /// `chunked`: a prompt chunk of a sequence with images, scanned
    /// chunk-parallel as mlx-vlm does ([`crate::chunked`]) where the scan
    /// would otherwise be the ops loop (CPU: mlx-vlm's numbers exactly).
    /// Where a fused op or kernel runs the scan (GPU), it runs images too:
    /// the chunked scan costs there ~7x the prefill of the kernel (a
    /// Qwen3.5-0.8B-shaped 652-token image prompt on an H100: 300 ms
    /// against 42 ms), and text on a GPU already differs from the ops
    /// scan by the same rounding.
    pub fn forward(&self, x: &Array, caches: &mut Caches<'_>, slot: usize, chunked: bool) -> Result<Array> {
        let d = self.dims;
        let (b, s) = (x.dim(0), x.dim(1));
        let qkv = self.in_qkv.forward(x)?;
        let z = self.in_z.forward(x)?.reshape(&[b, s, d.v_heads, d.v_dim])?;
        let beta_in = self.in_b.forward(x)?;
        let a = self.in_a.forward(x)?;

        let prev = caches.state(slot)?;
        let (conv_state, state) = match prev.as_slice() {
            [c, st] => (c.clone(), st.clone()),
            _ => (
                mlx::zeros(&[b, d.conv_kernel - 1, d.conv_dim()], x.dtype())?,
                mlx::zeros(&[b, d.v_heads, d.v_dim, d.k_dim], Dtype::F32)?,
            ),
        };
        let conv_in = mlx::concatenate(&[&conv_state, &qkv], 1)?;
        let total = conv_in.dim(1);
        let new_conv = conv_in.slice_axis(1, total - (d.conv_kernel - 1), total)?.contiguous()?;
        let conv = mlx::conv1d(&conv_in, &self.conv_w, 1, 0, 1, d.conv_dim())?;
        let conv = mlx::nn::silu(&conv)?;
        let kd = d.key_dim();
        let parts = conv.split_at(&[kd, 2 * kd], -1)?;
        let q = parts[0].reshape(&[b, s, d.k_heads, d.k_dim])?;
        let k = parts[1].reshape(&[b, s, d.k_heads, d.k_dim])?;
        let v = parts[2].reshape(&[b, s, d.v_heads, d.v_dim])?;

        // L2-normalise q and k (as an RMS norm with a rescaled eps) and fold
        // the 1/sqrt(Dk) read-out scale into q.
        let inv = (d.k_dim as f64).powf(-0.5);
        let rms_eps = (1e-6 * inv * inv) as f32;
        let q = mlx::fast::rms_norm(&q, None, rms_eps)?.mul_s(inv * inv)?;
        let k = mlx::fast::rms_norm(&k, None, rms_eps)?.mul_s(inv)?;

        // Decay g = exp(-exp(A_log) * softplus(a + dt_bias)) in float32; beta = sigmoid(b).
        let ab = a.add(&self.dt_bias)?;
        let softplus = ab.logaddexp(&ab.scalar_like(0.0)?)?;
        let g = self.neg_a.mul(&softplus)?.exp()?;
        let beta = beta_in.sigmoid()?;

        let ops = match self.path {
            ScanPath::Auto => auto_path() == ScanPath::Ops,
            p => p == ScanPath::Ops,
        };
        let (y, new_state) = if chunked && s > 1 && ops {
            crate::chunked::scan_chunked(&q, &k, &v, &g, &beta, &state)?
        } else {
            scan(self.path, &q, &k, &v, &g, &beta, &state)?
        };
        caches.set_state(slot, vec![new_conv, new_state], s as i64)?;

        // Gated RMS norm: rms_norm(y) * silu(z), computed in float32.
        let normed = mlx::fast::rms_norm(&y, Some(&self.norm_w), self.eps)?;
        let zf = z.astype(Dtype::F32)?;
        let gated = mlx::nn::silu(&zf)?.mul(&normed.astype(Dtype::F32)?)?.astype(y.dtype())?;
        self.out.forward(&gated.reshape(&[b, s, -1])?)
    }
}
