//! The Llama-style decoder every plain family shares: pre-norm blocks of
//! attention and a gated MLP, the final norm and the output head.

use super::attention::{Attention, AttentionShape};
use super::pipeline::Stage;
use crate::family::Caches;
use mlx::nn::{Embedding, GatedMlp, OutputHead, RmsNorm, Rope, Weights};
use mlx::{Array, Result};

/// The pre-norm decoder block of Llama-style models:
/// `h = x + attn(norm1(x)); out = h + mlp(norm2(h))`.
#[derive(Debug, Clone)]
pub struct PreNormBlock {
    /// self-attention
    pub attn: Attention,
    /// gated MLP
    pub mlp: GatedMlp,
    /// norm before attention
    pub input_norm: RmsNorm,
    /// norm before the MLP
    pub post_attn_norm: RmsNorm,
}

impl PreNormBlock {
    /// Runs the block through cache `slot`.
    pub fn forward(&self, x: &Array, caches: &mut Caches<'_>, slot: usize) -> Result<Array> {
        let h = x.add(&self.attn.forward(&self.input_norm.forward(x)?, caches, slot)?)?;
        h.add(&self.mlp.forward(&self.post_attn_norm.forward(&h)?)?)
    }
}

/// A decoder-only language model: embedding, blocks (one cache slot each),
/// final norm, and the output head (its own or the tied embedding).
#[derive(Debug, Clone)]
pub struct DecoderLm {
    /// token embedding
    pub embed: Embedding,
    /// blocks (of a pipeline split: this rank's, model layers `stage.layers`)
    pub blocks: Vec<PreNormBlock>,
    /// this rank's stage of a pipeline split
    pub stage: Option<Stage>,
    /// width of the residual stream
    pub hidden: i32,
    /// final norm
    pub norm: RmsNorm,
    /// output head
    pub head: OutputHead,
}

/// The shape of a [`DecoderLm`], from the model's config.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecoderShape {
    /// Vocabulary (embedding rows, logits).
    pub vocab: i32,
    /// Decoder blocks.
    pub layers: i32,
    /// Width of the MLPs.
    pub intermediate: i32,
    /// Epsilon of the blocks' and the final RMS norms.
    pub rms_norm_eps: f32,
    /// The attention of every block (its `hidden` is the model's width).
    pub attention: AttentionShape,
    /// Output head tied to the embedding (no `lm_head` tensor).
    pub tied: bool,
}

impl DecoderLm {
    /// Loads a Llama-style decoder under Hugging Face's names
    /// (`model.embed_tokens`, `model.layers.{i}.{self_attn,mlp,input_layernorm,
    /// post_attention_layernorm}`, `model.norm`, `lm_head`), every tensor
    /// checked against `shape`; every block's attention ropes with `rope`.
    pub fn load(w: &dyn Weights, shape: &DecoderShape, rope: &Rope) -> Result<DecoderLm> {
        let (h, eps) = (shape.attention.hidden, shape.rms_norm_eps);
        let stage = Stage::of(w, shape.layers)?;
        let blocks = (0..shape.layers)
            .filter(|&i| Stage::holds(stage.as_ref(), i as usize))
            .map(|i| {
                let p = format!("model.layers.{i}");
                Ok(PreNormBlock {
                    attn: Attention::load(w, &format!("{p}.self_attn"), &shape.attention, rope.clone())?,
                    mlp: GatedMlp::load(w, &format!("{p}.mlp"), h, shape.intermediate)?,
                    input_norm: RmsNorm::load(w, &format!("{p}.input_layernorm"), h, eps)?,
                    post_attn_norm: RmsNorm::load(w, &format!("{p}.post_attention_layernorm"), h, eps)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let embed = Embedding::load(w, "model.embed_tokens", shape.vocab, h)?;
        Ok(DecoderLm {
            head: OutputHead::load(w, "lm_head", &embed, shape.tied, h, shape.vocab)?,
            embed,
            blocks,
            stage,
            hidden: h,
            norm: RmsNorm::load(w, "model.norm", h, eps)?,
        })
    }
}

/// Applies the output `head` to the final (normed) hidden state where logits
/// are wanted: nowhere for prefill chunks, only the last position for
/// generation (the head is the largest matmul: skip it for the rest), or
/// every position.
pub fn lm_output(
    h: Array,
    wanted: crate::LogitsWanted,
    want_hidden: bool,
    head: impl Fn(&Array) -> Result<Array>,
) -> Result<crate::family::Output> {
    use crate::LogitsWanted;
    let logits = match wanted {
        LogitsWanted::None => None,
        LogitsWanted::Last => Some(head(&h.slice_axis(1, -1, h.dim(1))?)?),
        LogitsWanted::All => Some(head(&h)?),
    };
    Ok(crate::family::Output { logits, hidden: want_hidden.then_some(h) })
}

impl crate::family::Model for DecoderLm {
    fn forward(&mut self, input: &crate::family::Input, caches: &mut Caches<'_>) -> Result<crate::family::Output> {
        let stage = self.stage.as_ref();
        let shape = [input.tokens.dim(0), input.tokens.dim(1), self.hidden];
        let mut h = Stage::enter(stage, &shape, self.embed.dtype(), || input.embed(&self.embed))?;
        let first = stage.map_or(0, |s| s.layers.start);
        for (i, b) in self.blocks.iter().enumerate() {
            h = b.forward(&h, caches, first + i)?;
        }
        let h = self.norm.forward(&Stage::leave(stage, h, input)?)?;
        lm_output(h, input.logits, input.want_hidden, |x| self.head.forward(x))
    }
}
