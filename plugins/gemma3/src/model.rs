//! The decoder Gemma 2 and Gemma 3 share: the SDK's [`DecoderLm`] (blocks
//! with sandwich norms scaled by `1 + weight`, `√hidden`-scaled embeddings,
//! the head and its logit soft-cap) run by a forward of its own, for the
//! two things the shared block does not do: Gemma 2's soft-capped attention
//! scores (see [`crate::softcap`]) and Gemma 3's residual adds, clipped to
//! float16's range when the activations are float16.

use crate::softcap::softcapped_attention;
use mlx::nn::{Norm, NormKind};
use mlx::{Array, Dtype, Result};
use plugin_api::layers::{lm_output, Attention, BlockLayout, DecoderBlock, DecoderLm, HeadNorms, Stage};
use plugin_api::{Caches, Input, Model, Output};

/// Gemma's block: every norm `1 + weight`-scaled, around both halves:
/// `h = x + post_attn(attn(input(x)))`, `out = h + post_ffn(mlp(pre_ffn(h)))`.
pub fn sandwich(eps: f32) -> BlockLayout {
    BlockLayout {
        norm: NormKind::RmsOffset,
        eps,
        pre_attn: Some("input_layernorm"),
        post_attn: Some("post_attention_layernorm"),
        pre_ffn: Some("pre_feedforward_layernorm"),
        post_ffn: Some("post_feedforward_layernorm"),
        parallel: false,
        residual_scale: None,
    }
}

/// Gemma 3's per-head q/k norms scale by `1 + weight` too: folds the `1 +`
/// into the norms [`Attention::load`] read (as [`NormKind::RmsOffset`]
/// does, in the weight's own type), and rebuilds the one-token head norms
/// from them.
pub fn offset_qk_norms(attn: &mut Attention) -> Result<()> {
    for n in [&mut attn.q_norm, &mut attn.k_norm].into_iter().flatten() {
        n.weight = n.weight.add_s(1.0)?;
    }
    if attn.head_norms.is_some() {
        if let (Some(q), Some(k)) = (&attn.q_norm, &attn.k_norm) {
            attn.head_norms = HeadNorms::new(q, k, attn.n_heads, attn.n_kv_heads)?;
        }
    }
    Ok(())
}

/// A Gemma decoder-only language model (see the module documentation).
#[derive(Debug)]
pub struct GemmaLm {
    /// embedding, blocks, final norm, head
    pub lm: DecoderLm,
    /// Gemma 2's attention score soft-cap (`None`: plain attention, fused
    /// by the cache slot).
    pub attn_softcap: Option<f32>,
    /// Residual adds in float32 clipped to float16's range, for float16
    /// activations (Gemma 3's `clip_residual`).
    pub clip_f16: bool,
}

fn norm(n: &Option<Norm>, x: &Array) -> Result<Array> {
    match n {
        Some(n) => n.forward(x),
        None => Ok(x.clone()),
    }
}

impl GemmaLm {
    /// `x + y`; in float32 and clipped to float16's range when asked and
    /// the activations are float16 (they overflow there otherwise).
    fn residual(&self, x: &Array, y: &Array) -> Result<Array> {
        if !self.clip_f16 || x.dtype() != Dtype::F16 {
            return x.add(y);
        }
        let bound = 65504.0; // float16's largest finite value
        let (lo, hi) = (Array::f32(-bound), Array::f32(bound));
        x.astype(Dtype::F32)?.add(&y.astype(Dtype::F32)?)?.clip(Some(&lo), Some(&hi))?.astype(Dtype::F16)
    }

    /// Block `b` through cache `slot`.
    fn block(&self, b: &DecoderBlock, x: &Array, caches: &mut Caches<'_>, slot: usize) -> Result<Array> {
        let n = &b.norms;
        let normed = norm(&n.pre_attn, x)?;
        let a = match self.attn_softcap {
            Some(cap) => softcapped_attention(&b.attn, &normed, caches, slot, cap)?,
            None => b.attn.forward(&normed, caches, slot)?,
        };
        let h = self.residual(x, &norm(&n.post_attn, &a)?)?;
        let f = b.ffn.forward(&norm(&n.pre_ffn, &h)?)?;
        self.residual(&h, &norm(&n.post_ffn, &f)?)
    }
}

impl Model for GemmaLm {
    fn forward(&mut self, input: &Input, caches: &mut Caches<'_>) -> Result<Output> {
        let lm = &self.lm;
        let stage = lm.stage.as_ref();
        let mut h = lm.enter(input)?;
        let first = stage.map_or(0, |s| s.layers.start);
        for (i, b) in lm.blocks.iter().enumerate() {
            h = self.block(b, &h, caches, first + i)?;
        }
        let h = lm.norm.forward(&Stage::leave(stage, h, input)?)?;
        lm_output(h, input.logits, input.want_hidden, |x| lm.logits.apply(lm.head.forward(x)?))
    }
}
