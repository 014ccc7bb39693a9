//! Grouped-query self-attention with rotary positions, attending through a
//! host cache slot, with the options the in-tree families need: per-head
//! q/k RMS norms (Qwen3, Gemma), a scale-free v norm and keys used as values
//! (Gemma 4), a per-head output gate carried by the query projection
//! (Qwen3.5), another layer's or another model's K/V instead of its own
//! (Gemma 4's KV-shared layers and assistant drafter), and any score scale.

use super::head_norms::{rope_one_token, HeadNorms};
use super::Rotary;
use crate::family::{Caches, Position};
use crate::{AttnMask, AttnOptions};
use abi_stable::std_types::ROption;
use mlx::fast::{rms_norm, scaled_dot_product_attention, Mask, RopeOffset};
use mlx::nn::{HeadShare, Linear, Parallel, RmsNorm, Rope, Split, Weights};
use mlx::{arange, Array, Dtype, Error, Result};

/// The shape and options of an [`Attention`] layer, from the model's config.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionShape {
    /// Width of the residual stream (the projections' input, o's output).
    pub hidden: i32,
    /// Query heads.
    pub n_heads: i32,
    /// Key/value heads.
    pub n_kv_heads: i32,
    /// Features per head.
    pub head_dim: i32,
    /// Epsilon of the per-head q/k RMS norms (`{prefix}.{q,k}_norm`); `None`: no such norms.
    pub qk_norm_eps: Option<f32>,
    /// Epsilon of a scale-free RMS norm of the values (Gemma 4); `None`: values as projected.
    pub v_norm_eps: Option<f32>,
    /// The query projection carries a sigmoid output gate per head (`2·d`
    /// rows per head: query then gate), applied before `o_proj` (Qwen3.5).
    pub output_gate: bool,
    /// No `v_proj`: the keys' projection is the values' too (Gemma 4's K=V layers).
    pub k_eq_v: bool,
    /// The layer has its own K/V projections (false: it reads another's K/V).
    pub has_kv: bool,
    /// Score scale (`None`: `1/√head_dim`).
    pub scale: Option<f32>,
    /// The q, k and v projections have biases (required then).
    pub qkv_bias: bool,
    /// The output projection has a bias (required then).
    pub o_bias: bool,
    /// The q/k norms span the whole projection (`[heads·head_dim]`, OLMo 2)
    /// instead of each head (`[head_dim]`).
    pub qk_norm_whole: bool,
    /// The output projection's name under the layer (`o_proj`; Phi's `dense`).
    pub out_name: &'static str,
}

impl AttentionShape {
    /// Plain grouped-query attention: no norms, no gate, own K/V, scale `1/√head_dim`.
    pub fn new(hidden: i32, n_heads: i32, n_kv_heads: i32, head_dim: i32) -> Self {
        AttentionShape {
            hidden,
            n_heads,
            n_kv_heads,
            head_dim,
            qk_norm_eps: None,
            v_norm_eps: None,
            output_gate: false,
            k_eq_v: false,
            has_kv: true,
            scale: None,
            qkv_bias: false,
            o_bias: false,
            qk_norm_whole: false,
            out_name: "o_proj",
        }
    }

    /// With the output projection named `name` (Phi's `dense`), so the
    /// checkpoint's own names load (and `famlx convert` writes them back).
    pub fn out_named(self, name: &'static str) -> Self {
        AttentionShape { out_name: name, ..self }
    }

    /// With per-head q/k RMS norms of epsilon `eps`.
    pub fn qk_norms(self, eps: f32) -> Self {
        AttentionShape { qk_norm_eps: Some(eps), ..self }
    }

    /// With q/k RMS norms of epsilon `eps` over the whole projections
    /// (OLMo 2's `q_norm` of `heads·head_dim` features).
    pub fn qk_norms_whole(self, eps: f32) -> Self {
        AttentionShape { qk_norm_eps: Some(eps), qk_norm_whole: true, ..self }
    }

    /// With biases on the q/k/v projections (`qkv`) and on the output one (`o`).
    pub fn biases(self, qkv: bool, o: bool) -> Self {
        AttentionShape { qkv_bias: qkv, o_bias: o, ..self }
    }

    /// With scores scaled by `scale` instead of `1/√head_dim`.
    pub fn scaled(self, scale: f32) -> Self {
        AttentionShape { scale: Some(scale), ..self }
    }
}

/// The input projections of an [`Attention`]: separate matrices (k and v
/// absent where the layer has none), or one whose output is q, k and v side
/// by side (one matmul instead of three).
#[derive(Debug, Clone)]
pub enum Qkv {
    /// `q_proj`, and `k_proj`, `v_proj` where the layer has them.
    Split {
        /// q projection
        q: Linear,
        /// k projection
        k: Option<Linear>,
        /// v projection (absent when the keys' serve as values, or no K/V)
        v: Option<Linear>,
    },
    /// `qkv_proj` (fused by the host at load, see [`super::qkv_fusion`]).
    Fused(Linear),
}

/// K/V one layer attended over, lent to later layers that own none (Gemma
/// 4's KV-shared layers), with what their queries need to see them right.
#[derive(Clone)]
pub struct SharedKv {
    /// keys `[B, Hkv, S, D]`
    pub k: Array,
    /// values `[B, Hkv, S, D]`
    pub v: Array,
    /// Rope offset of the queries (the position of the first new token).
    pub offset: Position,
    /// Sliding window of the source layer (`None`: global).
    pub window: Option<i32>,
    /// In a batch, the keys that are real per row (`[B, 1, 1, S]` bool).
    pub row_mask: Option<Array>,
}

/// The attention mask for `l` queries that end the `s` keys: causal, and
/// `window` wide when given; `None` when nothing needs masking.
pub fn mask_for(l: i32, s: i32, window: Option<i32>) -> Result<Option<Array>> {
    if l == 1 && window.is_none_or(|w| s <= w) {
        return Ok(None);
    }
    let qi = arange((s - l) as f64, s as f64, 1.0, Dtype::I32)?.expand_dims(&[1])?;
    let ki = arange(0.0, s as f64, 1.0, Dtype::I32)?.expand_dims(&[0])?;
    let mut m = qi.ge(&ki)?;
    if let Some(w) = window {
        m = m.logical_and(&qi.lt(&ki.add(&Array::i32(w))?)?)?;
    }
    Ok(Some(m))
}

/// `mask` and-ed with a batch's per-row mask of real keys (`[B, 1, 1, S]`).
fn with_rows(mask: Option<Array>, rows: Option<&Array>) -> Result<Option<Array>> {
    Ok(match (mask, rows) {
        (Some(m), Some(r)) => Some(m.logical_and(r)?),
        (None, Some(r)) => Some(r.clone()),
        (m, None) => m,
    })
}

/// [`mask_for`] with `overlay` (`[l, l]` bool: where this call's queries
/// also see this call's keys, e.g. the tokens of one image seeing each
/// other both ways) or-ed into its last `l` key columns.
pub fn mask_with_overlay(l: i32, s: i32, window: Option<i32>, overlay: Option<&Array>) -> Result<Option<Array>> {
    let base = mask_for(l, s, window)?;
    match (base, overlay) {
        (Some(m), Some(o)) if l > 1 => {
            let o = if s > l {
                o.pad(&[1], &[s - l], &[0], &Array::from_slice(&[false], &[])?, "constant")?
            } else {
                o.clone()
            };
            Ok(Some(m.logical_or(&o)?))
        }
        (m, _) => Ok(m),
    }
}

/// Self-attention over a host cache slot (see the module documentation).
#[derive(Debug, Clone)]
pub struct Attention {
    /// q, k and v projections
    pub proj: Qkv,
    /// output projection
    pub o: Linear,
    /// norm of queries (per head, or over the projection when `qk_norm_whole`)
    pub q_norm: Option<RmsNorm>,
    /// norm of keys (per head, or over the projection when `qk_norm_whole`)
    pub k_norm: Option<RmsNorm>,
    /// the q/k norms span the whole projection
    pub qk_norm_whole: bool,
    /// epsilon of the scale-free per-head norm of values
    pub v_norm_eps: Option<f32>,
    /// the query projection carries an output gate per head
    pub output_gate: bool,
    /// query heads
    pub n_heads: i32,
    /// key/value heads
    pub n_kv_heads: i32,
    /// features per head
    pub head_dim: i32,
    /// score scale
    pub scale: f32,
    /// rotary embedding
    pub rope: Rope,
    /// The q/k (and v) norms as one [`HeadNorms`] over one token's fused
    /// heads (set by [`Attention::load`] when the projection is fused and
    /// both norms are present).
    pub head_norms: Option<HeadNorms>,
}

/// One call's projections, as `[B, L, h·d]`.
struct Projected {
    q: Array,
    gate: Option<Array>,
    kv: Option<(Array, Array)>,
}

impl Attention {
    /// Loads `{prefix}.qkv_proj` (or `{q,k,v}_proj`, as the layer has them),
    /// `o_proj` and, when the shape has a q/k norm epsilon,
    /// `{prefix}.{q,k}_norm`, each checked against `shape`. `rope` rotates
    /// queries and keys (its dims may be fewer than the head dim); scores
    /// are scaled by `shape.scale` (default `1/√head_dim`).
    pub fn load(w: &dyn Weights, prefix: &str, shape: &AttentionShape, rope: Rope) -> Result<Self> {
        let s = *shape;
        let (hidden, hq, hkv, d) = (s.hidden, s.n_heads, s.n_kv_heads, s.head_dim);
        let norm = |n: &str, heads: i32| {
            let width = if s.qk_norm_whole { heads * d } else { d };
            s.qk_norm_eps.map(|eps| RmsNorm::load(w, &format!("{prefix}.{n}"), width, eps)).transpose()
        };
        let lin = |n: &str, i: i32, o: i32| {
            let bias = if n == s.out_name { s.o_bias } else { s.qkv_bias };
            Linear::load_with_bias(w, &format!("{prefix}.{n}"), i, o, bias)
        };
        // Heads that do not split over the ranks (fewer heads than ranks,
        // or o_proj columns off its quantization groups on some rank) stay
        // whole on every rank: the same numbers, without the saving.
        let group = w.quant(&format!("{prefix}.{}", s.out_name)).map(|q| q.group_size);
        // Norms over the whole projection need every head: such layers stay whole.
        let share = Parallel::tensor(w.parallel())
            .filter(|_| !(s.qk_norm_whole && s.qk_norm_eps.is_some()))
            .and_then(|p| HeadShare::split(&p, hq, hkv, d, group));
        let (proj, o, hq, hkv) = match share {
            Some(share) => Self::load_share(w, prefix, &s, share)?,
            None => {
                let q_rows = if s.output_gate { 2 * hq * d } else { hq * d };
                let fused =
                    s.has_kv && !s.k_eq_v && !s.output_gate && w.get(&format!("{prefix}.qkv_proj.weight")).is_some();
                let proj = if fused {
                    Qkv::Fused(lin("qkv_proj", hidden, (hq + 2 * hkv) * d)?)
                } else {
                    Qkv::Split {
                        q: lin("q_proj", hidden, q_rows)?,
                        k: s.has_kv.then(|| lin("k_proj", hidden, hkv * d)).transpose()?,
                        v: (s.has_kv && !s.k_eq_v).then(|| lin("v_proj", hidden, hkv * d)).transpose()?,
                    }
                };
                (proj, lin(s.out_name, hq * d, hidden)?, hq, hkv)
            }
        };
        let q_norm = norm("q_norm", s.n_heads)?;
        let k_norm = if s.has_kv { norm("k_norm", s.n_kv_heads)? } else { None };
        let head_norms = match (&proj, &q_norm, &k_norm) {
            (Qkv::Fused(_), Some(qn), Some(kn)) if !s.qk_norm_whole && s.v_norm_eps.is_none_or(|e| e == qn.eps) => {
                HeadNorms::new(qn, kn, hq, hkv)?
            }
            _ => None,
        };
        Ok(Attention {
            proj,
            o,
            q_norm,
            k_norm,
            qk_norm_whole: s.qk_norm_whole,
            v_norm_eps: s.v_norm_eps,
            output_gate: s.output_gate,
            n_heads: hq,
            n_kv_heads: hkv,
            head_dim: d,
            scale: s.scale.unwrap_or((d as f32).powf(-0.5)),
            rope,
            head_norms,
        })
    }

    /// This rank's heads of a tensor-parallel split (see [`HeadShare`]):
    /// the q/k/v rows of its heads (stacked into one projection where they
    /// stack) and the `o_proj` columns they feed, summed over the group.
    /// Returns the projections and the local query and key/value head counts.
    fn load_share(
        w: &dyn Weights,
        prefix: &str,
        s: &AttentionShape,
        share: HeadShare,
    ) -> Result<(Qkv, Linear, i32, i32)> {
        let (hidden, hq, hkv, d) = (s.hidden, s.n_heads, s.n_kv_heads, s.head_dim);
        let ((qa, qb), (ka, kb)) = (share.q, share.kv);
        let split = |n: &str, i: i32, o: i32, sp: Split| {
            let bias = if n == s.out_name { s.o_bias } else { s.qkv_bias };
            Linear::load_split(w, &format!("{prefix}.{n}"), i, o, bias, &sp)
        };
        let rows = |ranges: &[(i32, i32)]| Split::Rows(ranges.to_vec());
        let qd = if s.output_gate { 2 * d } else { d };
        let native_fused =
            s.has_kv && !s.k_eq_v && !s.output_gate && w.get(&format!("{prefix}.qkv_proj.weight")).is_some();
        let proj = if native_fused {
            let (k0, v0) = (hq * d, (hq + hkv) * d);
            let r = rows(&[(qa * d, qb * d), (k0 + ka * d, k0 + kb * d), (v0 + ka * d, v0 + kb * d)]);
            Qkv::Fused(split("qkv_proj", hidden, (hq + 2 * hkv) * d, r)?)
        } else {
            let q = split("q_proj", hidden, hq * qd, rows(&[(qa * qd, qb * qd)]))?;
            let kv_rows = || rows(&[(ka * d, kb * d)]);
            let k = s.has_kv.then(|| split("k_proj", hidden, hkv * d, kv_rows())).transpose()?;
            let v = (s.has_kv && !s.k_eq_v).then(|| split("v_proj", hidden, hkv * d, kv_rows())).transpose()?;
            let stacked = match (&k, &v) {
                (Some(k), Some(v)) if !s.output_gate => Linear::stack(&[&q, k, v])?,
                _ => None,
            };
            match stacked {
                Some(f) => Qkv::Fused(f),
                None => Qkv::Split { q, k, v },
            }
        };
        let o = split(s.out_name, hq * d, hidden, Split::Cols(qa * d, qb * d))?;
        Ok((proj, o, qb - qa, kb - ka))
    }

    /// `[B, L, h·d]` → `[B, h, L, d]`, normed per head by `norm`. For one
    /// token the layouts coincide, so a reshape does it without a transpose
    /// node (decode is bound by host time per graph node).
    fn heads(&self, x: &Array, l: i32, h: i32, norm: impl FnOnce(&Array) -> Result<Array>) -> Result<Array> {
        let (b, d) = (x.dim(0), self.head_dim);
        if l == 1 {
            norm(&x.reshape(&[b, h, 1, d])?)
        } else {
            norm(&x.reshape(&[b, l, h, d])?)?.transpose(&[0, 2, 1, 3])
        }
    }

    /// `[B, h, L, d]` → `[B, L, h·d]`; for one token a reshape is enough.
    fn merge_heads(o: &Array, b: i32, l: i32) -> Result<Array> {
        if l == 1 {
            o.reshape(&[b, 1, -1])
        } else {
            o.transpose(&[0, 2, 1, 3])?.reshape(&[b, l, -1])
        }
    }

    /// The projections' outputs: q (and its gate), and k and v when the
    /// layer has them (v is k's output in K=V layers).
    fn project(&self, x: &Array) -> Result<Projected> {
        let (b, l) = (x.dim(0), x.dim(1));
        let (hq, hkv, d) = (self.n_heads, self.n_kv_heads, self.head_dim);
        match &self.proj {
            Qkv::Split { q, k, v } => {
                let kv = match k {
                    Some(kp) => {
                        let k = kp.forward(x)?;
                        let v = match v {
                            Some(vp) => vp.forward(x)?,
                            None => k.clone(),
                        };
                        Some((k, v))
                    }
                    None => None,
                };
                let q = q.forward(x)?;
                if !self.output_gate {
                    return Ok(Projected { q, gate: None, kv });
                }
                // Per head: d query features, then d gate features.
                let mut parts = q.reshape(&[b, l, hq, 2 * d])?.split_at(&[d], -1)?;
                let gate = parts.pop().expect("2 parts").reshape(&[b, l, -1])?;
                Ok(Projected { q: parts.pop().expect("2 parts"), gate: Some(gate), kv })
            }
            Qkv::Fused(p) => {
                let mut p = p.forward(x)?.split_at(&[hq * d, (hq + hkv) * d], -1)?;
                let v = p.pop().expect("3 parts");
                let k = p.pop().expect("3 parts");
                Ok(Projected { q: p.pop().expect("3 parts"), gate: None, kv: Some((k, v)) })
            }
        }
    }

    /// `x` (`[B, L, h·d]`) as `[B, h, L, d]`, normed by `norm`: per head,
    /// or over the whole projection first when the layer's norms span it.
    fn normed_heads(&self, x: &Array, l: i32, h: i32, norm: Option<&RmsNorm>) -> Result<Array> {
        match norm {
            Some(n) if self.qk_norm_whole => self.heads(&n.forward(x)?, l, h, |y| Ok(y.clone())),
            Some(n) => self.heads(x, l, h, |y| n.forward(y)),
            None => self.heads(x, l, h, |y| Ok(y.clone())),
        }
    }

    /// Normed queries `[B, h, L, d]`, before rope.
    fn queries(&self, q: &Array, l: i32) -> Result<Array> {
        self.normed_heads(q, l, self.n_heads, self.q_norm.as_ref())
    }

    /// Normed keys `[B, h, L, d]`, before rope.
    fn keys(&self, k: &Array, l: i32) -> Result<Array> {
        self.normed_heads(k, l, self.n_kv_heads, self.k_norm.as_ref())
    }

    /// Roped queries, and roped keys with (normed) values when the layer has
    /// them, all `[B, h, L, d]`, at position `off`; and the output gate.
    #[allow(clippy::type_complexity)]
    fn qkv(&self, x: &Array, off_r: RopeOffset<'_>) -> Result<(Array, Option<(Array, Array)>, Option<Array>)> {
        let (b, l) = (x.dim(0), x.dim(1));
        let (hq, hkv) = (self.n_heads, self.n_kv_heads);
        let no_norms = self.q_norm.is_none() && self.k_norm.is_none() && self.v_norm_eps.is_none();
        if let Qkv::Fused(p) = &self.proj {
            let one_norm = self.head_norms.as_ref().filter(|n| n.fits(x.dtype()));
            if l == 1 && (no_norms || one_norm.is_some()) {
                // One token: every head (normed at once, with q/k norms) in
                // one rope call, no transpose; v from the unrotated heads,
                // normed only when the layer norms its values.
                let y = p.forward(x)?.reshape(&[b, hq + 2 * hkv, 1, self.head_dim])?;
                let (q, k, v) = match one_norm {
                    Some(n) => {
                        let yn = n.apply(&y)?;
                        let (q, k) = rope_one_token(&self.rope, &yn, off_r, hq, hkv)?;
                        let src = if self.v_norm_eps.is_some() { &yn } else { &y };
                        (q, k, src.slice_axis(1, hq + hkv, hq + 2 * hkv)?)
                    }
                    None => {
                        let (q, k) = rope_one_token(&self.rope, &y, off_r, hq, hkv)?;
                        (q, k, y.slice_axis(1, hq + hkv, hq + 2 * hkv)?)
                    }
                };
                return Ok((q, Some((k, v)), None));
            }
            if no_norms {
                // Heads of q and k side by side: one rope call for both.
                let y = p.forward(x)?.reshape(&[b, l, hq + 2 * hkv, -1])?.transpose(&[0, 2, 1, 3])?;
                let qk = self.rope.forward(&y.slice_axis(1, 0, hq + hkv)?, off_r)?;
                let mut qk = qk.split_at(&[hq], 1)?;
                let k = qk.pop().expect("2 parts");
                return Ok((qk.pop().expect("2 parts"), Some((k, y.slice_axis(1, hq + hkv, hq + 2 * hkv)?)), None));
            }
        }
        let Projected { q, gate, kv } = self.project(x)?;
        let q = self.rope.forward(&self.queries(&q, l)?, off_r)?;
        let kv = match kv {
            Some((k, v)) => {
                let k = self.keys(&k, l)?;
                let v = self.heads(&v, l, hkv, |x| match self.v_norm_eps {
                    Some(eps) => rms_norm(x, None, eps),
                    None => Ok(x.clone()),
                })?;
                Some((self.rope.forward(&k, off_r)?, v))
            }
            None => None,
        };
        Ok((q, kv, gate))
    }

    /// The attention output `o` (`[B, h, L, d]`) through the gate and `o_proj`.
    fn finish(&self, o: &Array, gate: Option<&Array>, b: i32, l: i32) -> Result<Array> {
        let o = Self::merge_heads(o, b, l)?;
        match gate {
            Some(g) => self.o.forward(&o.mul(&g.sigmoid()?)?),
            None => self.o.forward(&o),
        }
    }

    fn no_kv() -> Error {
        Error::msg("attention: a layer without K/V projections must be given another layer's K/V")
    }

    /// `x` is `[B, L, hidden]`; appends its K/V to cache `slot` and attends
    /// over everything cached there.
    pub fn forward(&self, x: &Array, caches: &mut Caches<'_>, slot: usize) -> Result<Array> {
        let (b, l) = (x.dim(0), x.dim(1));
        let pos = caches.position(slot)?;
        let (q, kv, gate) = self.qkv(x, pos.rope())?;
        let (k, v) = kv.ok_or_else(Self::no_kv)?;
        let o = caches.attend(slot, q, k, v, AttnOptions::causal(self.scale))?;
        self.finish(&o, gate.as_ref(), b, l)
    }

    /// [`Attention::forward`] with queries and keys rotated by `rotary`
    /// (explicit per-token positions, e.g. M-RoPE) instead of the layer's
    /// rope at the cache offset.
    pub fn forward_rotary(&self, x: &Array, caches: &mut Caches<'_>, slot: usize, rotary: &Rotary) -> Result<Array> {
        let (b, l) = (x.dim(0), x.dim(1));
        let Projected { q, gate, kv } = self.project(x)?;
        let (k, v) = kv.ok_or_else(Self::no_kv)?;
        let q = rotary.apply(&self.queries(&q, l)?)?;
        let k = self.keys(&k, l)?;
        let v = self.heads(&v, l, self.n_kv_heads, |x| match self.v_norm_eps {
            Some(eps) => rms_norm(x, None, eps),
            None => Ok(x.clone()),
        })?;
        let o = caches.attend(slot, q, rotary.apply(&k)?, v, AttnOptions::causal(self.scale))?;
        self.finish(&o, gate.as_ref(), b, l)
    }

    /// Like [`Attention::forward`], keeping the K/V it attended over for
    /// later layers that own none: fetched from the cache and attended here
    /// with the mask the slot's kind implies (`window` for a sliding one),
    /// widened by `overlay` (see [`mask_with_overlay`]).
    pub fn forward_keeping(
        &self,
        x: &Array,
        caches: &mut Caches<'_>,
        slot: usize,
        window: Option<i32>,
        overlay: Option<&Array>,
    ) -> Result<(Array, SharedKv)> {
        let (b, l) = (x.dim(0), x.dim(1));
        let pos = caches.position(slot)?;
        let (q, kv, gate) = self.qkv(x, pos.rope())?;
        let (k, v) = kv.ok_or_else(Self::no_kv)?;
        let (k, v) = caches.update_and_fetch(slot, k, v)?;
        let row_mask = caches.row_mask(slot)?;
        let m = with_rows(mask_with_overlay(l, k.dim(2), window, overlay)?, row_mask.as_ref())?;
        let mask = m.as_ref().map_or(Mask::None, Mask::Array);
        let o = scaled_dot_product_attention(&q, &k, &v, self.scale, mask, None)?;
        Ok((self.finish(&o, gate.as_ref(), b, l)?, SharedKv { k, v, offset: pos, window, row_mask }))
    }

    /// Attends over K/V another layer kept ([`Attention::forward_keeping`]),
    /// the mask widened by `overlay`.
    pub fn forward_shared(&self, x: &Array, kv: &SharedKv, overlay: Option<&Array>) -> Result<Array> {
        let (b, l) = (x.dim(0), x.dim(1));
        let Projected { q, gate, .. } = self.project(x)?;
        let q = self.rope.forward(&self.queries(&q, l)?, kv.offset.rope())?;
        let m = with_rows(mask_with_overlay(l, kv.k.dim(2), kv.window, overlay)?, kv.row_mask.as_ref())?;
        let mask = m.as_ref().map_or(Mask::None, Mask::Array);
        let o = scaled_dot_product_attention(&q, &kv.k, &kv.v, self.scale, mask, None)?;
        self.finish(&o, gate.as_ref(), b, l)
    }

    /// Attends over what another model cached in `target`'s slot `slot`
    /// (a drafter reading its target's caches, read-only): queries roped at
    /// `offset`, `mask` as the cache call takes it.
    pub fn forward_cached(
        &self,
        x: &Array,
        target: &Caches<'_>,
        slot: usize,
        offset: i32,
        mask: AttnMask,
    ) -> Result<Array> {
        let (b, l) = (x.dim(0), x.dim(1));
        let Projected { q, gate, .. } = self.project(x)?;
        let q = self.rope.forward(&self.queries(&q, l)?, RopeOffset::Int(offset))?;
        let o = target.attend_cached(slot, q, AttnOptions { scale: self.scale, mask, sinks: ROption::RNone })?;
        self.finish(&o, gate.as_ref(), b, l)
    }
}
