//! Llama 4's long-context attention scaling, as Ministral 3 uses it: the
//! queries at position `p` are multiplied by `1 + β·ln(1 + ⌊p / span⌋)`
//! after rope, so attention sharpens in steps as the context grows past
//! multiples of the original context `span`. A decoder that does this is
//! Llama's otherwise: [`ScaledQueryLm`] runs the blocks [`DecoderLm::build`]
//! loads, with its own attention call.

use mlx::{arange, Array, Dtype, Error, Result};
use plugin_api::family::{Caches, Input, Output, Position};
use plugin_api::layers::{lm_output, Attention, DecoderBlock, DecoderLm, Qkv, Stage};
use plugin_api::{AttnOptions, Model};

/// The scaling: `β` and the span of positions each step covers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PositionScale {
    /// `llama_4_scaling_beta`
    pub beta: f32,
    /// `original_max_position_embeddings`
    pub span: i32,
}

impl PositionScale {
    /// The factors of `l` queries from position `pos`, in `dtype`: `[l, 1]`
    /// for one offset, `[B, 1, l, 1]` for one per row, ready to multiply
    /// queries `[B, H, l, D]`.
    pub fn factors(&self, pos: &Position, l: i32, dtype: Dtype) -> Result<Array> {
        let steps = arange(0.0, l as f64, 1.0, Dtype::I32)?;
        let positions = match pos {
            Position::Int(o) => steps.add(&Array::i32(*o))?.reshape(&[l, 1])?,
            Position::Rows(o) => steps.expand_dims(&[0])?.add(&o.expand_dims(&[1])?)?.expand_dims(&[1, 3])?,
        };
        let step = positions.astype(Dtype::F32)?.div_s(self.span as f64)?.floor()?;
        step.add_s(1.0)?.log()?.mul_s(self.beta as f64)?.add_s(1.0)?.astype(dtype)
    }
}

/// `attn` over cache `slot`, its roped queries multiplied by `factors`
/// (see [`PositionScale::factors`]) before the scores.
pub fn scaled_attention(
    attn: &Attention,
    x: &Array,
    caches: &mut Caches<'_>,
    slot: usize,
    factors: &Array,
) -> Result<Array> {
    let (b, l) = (x.dim(0), x.dim(1));
    let (hq, hkv, d) = (attn.n_heads, attn.n_kv_heads, attn.head_dim);
    let (q, k, v) = match &attn.proj {
        Qkv::Split { q, k: Some(k), v: Some(v) } => (q.forward(x)?, k.forward(x)?, v.forward(x)?),
        Qkv::Fused(p) => {
            let mut p = p.forward(x)?.split_at(&[hq * d, (hq + hkv) * d], -1)?;
            let v = p.pop().expect("3 parts");
            let k = p.pop().expect("3 parts");
            (p.pop().expect("3 parts"), k, v)
        }
        Qkv::Split { .. } => return Err(Error::msg("attention: a layer without K/V projections")),
    };
    let heads = |t: &Array, h: i32| t.reshape(&[b, l, h, d])?.transpose(&[0, 2, 1, 3]);
    let pos = caches.position(slot)?;
    let q = attn.rope.forward(&heads(&q, hq)?, pos.rope())?.mul(factors)?;
    let k = attn.rope.forward(&heads(&k, hkv)?, pos.rope())?;
    let o = caches.attend(slot, q, k, heads(&v, hkv)?, AttnOptions::causal(attn.scale))?;
    attn.o.forward(&o.transpose(&[0, 2, 1, 3])?.reshape(&[b, l, -1])?)
}

/// A pre-norm block (Llama's) with [`scaled_attention`].
fn block_forward(b: &DecoderBlock, x: &Array, caches: &mut Caches<'_>, slot: usize, factors: &Array) -> Result<Array> {
    let normed = |n: &Option<mlx::nn::Norm>, x: &Array| match n {
        Some(n) => n.forward(x),
        None => Ok(x.clone()),
    };
    let h = x.add(&scaled_attention(&b.attn, &normed(&b.norms.pre_attn, x)?, caches, slot, factors)?)?;
    h.add(&b.ffn.forward(&normed(&b.norms.pre_ffn, &h)?)?)
}

/// A Llama-style decoder whose attention scales its queries by position.
#[derive(Debug)]
pub struct ScaledQueryLm {
    /// The decoder's weights: embedding, pre-norm blocks, final norm, head.
    pub lm: DecoderLm,
    /// The queries' scaling.
    pub scale: PositionScale,
}

impl Model for ScaledQueryLm {
    fn forward(&mut self, input: &Input, caches: &mut Caches<'_>) -> Result<Output> {
        let lm = &self.lm;
        let stage = lm.stage.as_ref();
        let mut h = lm.enter(input)?;
        let first = stage.map_or(0, |s| s.layers.start);
        if !lm.blocks.is_empty() {
            // One offset for every layer: they all hold the same tokens.
            let factors = self.scale.factors(&caches.position(first)?, h.dim(1), h.dtype())?;
            for (i, b) in lm.blocks.iter().enumerate() {
                h = block_forward(b, &h, caches, first + i, &factors)?;
            }
        }
        let h = lm.norm.forward(&Stage::leave(stage, h, input)?)?;
        lm_output(h, input.logits, input.want_hidden, |x| lm.head.forward(x))
    }
}
