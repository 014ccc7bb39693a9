//! Attention over what a cache holds: MLX's fused SDPA for dense data,
//! quantized SDPA straight on the packed buffers when keys and values share
//! one quantization, dequantize-then-SDPA otherwise; and the masks caches need.

use super::store::{QBits, Seq};
use mlx::fast::{scaled_dot_product_attention, Mask};
use mlx::quant::{quantized_matmul, Quantized};
use mlx::{arange, where_, Array, Dtype, Result};

/// Host-side options of an attention call.
#[derive(Clone)]
pub struct AttnArgs {
    /// Score scale.
    pub scale: f32,
    /// The mask. `Causal` asks for the cache's own causal mask, which it
    /// makes concrete (windowed for a rotating cache, see `attend`).
    pub mask: KvMask,
    /// Per-head sink logits.
    pub sinks: Option<Array>,
}

impl AttnArgs {
    /// Causal attention with `scale`.
    pub fn causal(scale: f32) -> Self {
        AttnArgs { scale, mask: KvMask::Causal, sinks: None }
    }
}

/// Attends `q` (`[B, Hq, L, D]`) over `k`/`v`; a causal request takes
/// `causal`, the cache's concrete form of it for its last update.
pub fn attend(q: &Array, k: &Seq, v: &Seq, args: &AttnArgs, causal: KvMask) -> Result<Array> {
    let mask = match &args.mask {
        KvMask::Causal => causal,
        other => other.clone(),
    };
    if let (Seq::Packed(kq, kb), Seq::Packed(vq, vb), None) = (k, v, &args.sinks) {
        if kb == vb {
            return quantized_sdpa(q, kq, vq, *kb, args.scale, &mask);
        }
    }
    // Mixed widths (or sinks, which the packed path lacks): attend densely.
    let (k, v) = (k.dense()?, v.dense()?);
    let sinks = args.sinks.as_ref();
    match &mask {
        KvMask::None => scaled_dot_product_attention(q, &k, &v, args.scale, Mask::None, sinks),
        KvMask::Causal => scaled_dot_product_attention(q, &k, &v, args.scale, Mask::Causal, sinks),
        KvMask::Array(m) => scaled_dot_product_attention(q, &k, &v, args.scale, Mask::Array(m), sinks),
    }
}

/// The most negative finite value of a float dtype (masked scores).
fn lowest(d: Dtype) -> f64 {
    match d {
        Dtype::F16 => -65504.0,
        Dtype::BF16 => -3.389_531_389_251_535_5e38,
        Dtype::F64 => f64::MIN,
        _ => f32::MIN as f64,
    }
}

fn expand(q: &Quantized, axis: i32) -> Result<Quantized> {
    Ok(Quantized {
        w: q.w.expand_dims(&[axis])?,
        scales: q.scales.expand_dims(&[axis])?,
        biases: q.biases.as_ref().map(|b| b.expand_dims(&[axis])).transpose()?,
    })
}

/// `softmax(q kᵀ · scale + mask) v` with both matmuls on packed data; the
/// query heads are grouped per KV head by a reshape (no repeated keys).
fn quantized_sdpa(q: &Array, kq: &Quantized, vq: &Quantized, qb: QBits, scale: f32, mask: &KvMask) -> Result<Array> {
    let (b, hq, l, d) = (q.dim(0), q.dim(1), q.dim(2), q.dim(3));
    let hkv = kq.w.dim(1);
    let rep = hq / hkv;
    let spec = qb.spec();
    let mut q = q.mul_s(scale as f64)?;
    let (kq, vq) = if rep > 1 {
        q = q.reshape(&[b, hkv, rep, l, d])?;
        (expand(kq, 2)?, expand(vq, 2)?)
    } else {
        (kq.clone(), vq.clone())
    };
    let mut scores = quantized_matmul(&q, &kq, &spec, true)?;
    let s = scores.dim(-1);
    let m = match mask {
        KvMask::None => None,
        KvMask::Causal if l > 1 => Some(causal_mask(l, s)?),
        KvMask::Causal => None,
        KvMask::Array(m) if rep > 1 && m.ndim() == 4 && m.dim(1) == hq && hq > 1 => {
            Some(m.reshape(&[m.dim(0), hkv, rep, m.dim(2), m.dim(3)])?)
        }
        KvMask::Array(m) if rep > 1 && m.ndim() > 3 => Some(m.expand_dims(&[-3])?),
        KvMask::Array(m) => Some(m.clone()),
    };
    if let Some(m) = m {
        scores = if m.dtype() == Dtype::Bool {
            where_(&m, &scores, &Array::scalar_f(lowest(scores.dtype()), scores.dtype())?)?
        } else {
            scores.add(&m)?
        };
    }
    // Softmax accumulates in f32 (precise) whatever the activation dtype.
    let p = scores.softmax(&[-1], true)?;
    let out = quantized_matmul(&p, &vq, &spec, false)?;
    if rep > 1 {
        let dv = out.dim(-1);
        return out.reshape(&[b, hq, l, dv]);
    }
    Ok(out)
}

/// Bool `[l, s]`: query `i` (at position `s - l + i`) sees keys `0..=s - l + i`.
pub fn causal_mask(l: i32, s: i32) -> Result<Array> {
    let qi = arange((s - l) as f64, s as f64, 1.0, Dtype::I32)?.expand_dims(&[1])?;
    let ki = arange(0.0, s as f64, 1.0, Dtype::I32)?.expand_dims(&[0])?;
    qi.ge(&ki)
}

/// Bool `[n, offset + n]`: query `i` (at index `offset + i`) sees the keys at
/// indices `j` with `j <= offset + i < j + window`.
pub fn window_mask(n: i32, offset: i32, window: i32) -> Result<Array> {
    let qi = arange(offset as f64, (offset + n) as f64, 1.0, Dtype::I32)?.expand_dims(&[1])?;
    let ki = arange(0.0, (offset + n) as f64, 1.0, Dtype::I32)?.expand_dims(&[0])?;
    let causal = qi.ge(&ki)?;
    let near = qi.lt(&ki.add(&Array::i32(window))?)?;
    causal.logical_and(&near)
}

/// The mask of an attention over a cache: what a call asks for
/// ([`AttnArgs::mask`]) and what the cache makes of a causal request.
#[derive(Clone)]
pub enum KvMask {
    /// No mask.
    None,
    /// Lower-right aligned causal.
    Causal,
    /// An explicit mask broadcastable to the scores (bool or additive).
    Array(Array),
}
