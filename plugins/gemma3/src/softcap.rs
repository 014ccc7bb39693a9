//! Gemma 2's attention: scores soft-capped (`tanh(s / cap) · cap`) before
//! the softmax. The fused attention kernel the cache slots run cannot do
//! that, so this one fetches the slot's K/V and attends by hand, with the
//! projections, rope and scale of a shared [`Attention`].

use mlx::{where_, Array, Dtype, Error, Result};
use plugin_api::layers::{mask_for, Attention, Qkv};
use plugin_api::Caches;

/// The lowest finite value of `dt`, for masked scores.
fn lowest(dt: Dtype) -> f64 {
    match dt {
        Dtype::F16 => -65504.0,
        // bfloat16's largest finite magnitude: (2 - 2^-7) · 2^127.
        Dtype::BF16 => -3.389_531_389_251_535_5e38,
        _ => f32::MIN as f64,
    }
}

/// The q, k and v projections of `x`, each `[B, L, heads·head_dim]`.
fn project(attn: &Attention, x: &Array) -> Result<(Array, Array, Array)> {
    match &attn.proj {
        Qkv::Split { q, k: Some(k), v: Some(v) } => Ok((q.forward(x)?, k.forward(x)?, v.forward(x)?)),
        Qkv::Fused(p) => {
            let (q, kv) = (attn.n_heads * attn.head_dim, attn.n_kv_heads * attn.head_dim);
            let mut parts = p.forward(x)?.split_at(&[q, q + kv], -1)?;
            let v = parts.pop().expect("3 parts");
            let k = parts.pop().expect("3 parts");
            Ok((parts.pop().expect("3 parts"), k, v))
        }
        Qkv::Split { .. } => Err(Error::msg("gemma2 attention: a layer needs its own k and v projections")),
    }
}

/// `attn` over `x` (`[B, L, hidden]`) through cache `slot`, its scores
/// soft-capped at `cap`: queries scaled, `q·kᵀ` per key/value head group,
/// capped, masked (causal, and a batch's padding), softmax in float32.
pub fn softcapped_attention(
    attn: &Attention,
    x: &Array,
    caches: &mut Caches<'_>,
    slot: usize,
    cap: f32,
) -> Result<Array> {
    let (b, l) = (x.dim(0), x.dim(1));
    let (hq, hkv, d) = (attn.n_heads, attn.n_kv_heads, attn.head_dim);
    let heads = |t: &Array, h: i32| t.reshape(&[b, l, h, d])?.transpose(&[0, 2, 1, 3]);
    let (q, k, v) = project(attn, x)?;
    let pos = caches.position(slot)?;
    let q = attn.rope.forward(&heads(&q, hq)?, pos.rope())?;
    let k = attn.rope.forward(&heads(&k, hkv)?, pos.rope())?;
    let (k, v) = caches.update_and_fetch(slot, k, heads(&v, hkv)?)?;
    let s = k.dim(2);

    // Queries grouped by the key/value head they share: [B, Hkv, rep, L, D].
    let q = q.mul_s(attn.scale as f64)?.reshape(&[b, hkv, hq / hkv, l, d])?;
    let (k, v) = (k.expand_dims(&[2])?, v.expand_dims(&[2])?);
    let scores = q.matmul(&k.swapaxes(-1, -2)?)?;
    let scores = scores.div_s(cap as f64)?.tanh()?.mul_s(cap as f64)?;

    // A batch's per-row mask of real keys is [B, 1, 1, S]: one more axis
    // for the head groups.
    let rows = caches.row_mask(slot)?.map(|r| r.expand_dims(&[1])).transpose()?;
    let mask = match (mask_for(l, s, None)?, rows) {
        (Some(m), Some(r)) => Some(m.logical_and(&r)?),
        (m, r) => m.or(r),
    };
    let scores = match mask {
        Some(m) => where_(&m, &scores, &scores.scalar_like(lowest(scores.dtype()))?)?,
        None => scores,
    };
    let o = scores.softmax(&[-1], true)?.matmul(&v)?.reshape(&[b, hq, l, d])?;
    attn.o.forward(&o.transpose(&[0, 2, 1, 3])?.reshape(&[b, l, -1])?)
}
