//! The decoder every plain family shares: blocks of attention and a
//! feed-forward part with the norms around them where the family puts them
//! (pre-norm as Llama, sandwich as Gemma, post-norm as OLMo 2, parallel as
//! Cohere and Phi), the final norm and the output head, with the scalings
//! some families add to the embeddings, the residual stream and the logits.

use super::attention::{Attention, AttentionShape};
use super::pipeline::Stage;
use crate::family::Caches;
use mlx::nn::{Embedding, GatedMlp, Norm, NormKind, OutputHead, PlainMlp, Rope, Weights};
use mlx::{Array, Result};

/// A block's feed-forward part: a dense MLP, a mixture of experts, or a
/// family's own, from the normed hidden state `[B, L, hidden]` to its update.
pub trait FeedForward: std::fmt::Debug + Send {
    /// The update for `x`.
    fn forward(&self, x: &Array) -> Result<Array>;
}

impl FeedForward for GatedMlp {
    fn forward(&self, x: &Array) -> Result<Array> {
        GatedMlp::forward(self, x)
    }
}

impl FeedForward for PlainMlp {
    fn forward(&self, x: &Array) -> Result<Array> {
        PlainMlp::forward(self, x)
    }
}

/// Where a block's norms sit, by their tensor names under the block's
/// prefix (`None`: no such norm), and how its residual adds up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlockLayout {
    /// The kind of every norm of the block.
    pub norm: NormKind,
    /// Their epsilon.
    pub eps: f32,
    /// Norm of the block's input, before attention (Llama's `input_layernorm`).
    pub pre_attn: Option<&'static str>,
    /// Norm of the attention's output, before the residual add (Gemma's
    /// `post_attention_layernorm`, GLM-4's `post_self_attn_layernorm`).
    pub post_attn: Option<&'static str>,
    /// Norm before the feed-forward part (Llama's `post_attention_layernorm`,
    /// Gemma's `pre_feedforward_layernorm`).
    pub pre_ffn: Option<&'static str>,
    /// Norm of the feed-forward part's output (Gemma's
    /// `post_feedforward_layernorm`, GLM-4's `post_mlp_layernorm`).
    pub post_ffn: Option<&'static str>,
    /// Attention and the feed-forward part both read the normed input and
    /// add to it side by side: `x + attn(n) + ffn(n)` with `n = pre_attn(x)`
    /// (Cohere, Phi, GPT-J style).
    pub parallel: bool,
    /// Both updates scaled by this before they are added (Granite's
    /// `residual_multiplier`).
    pub residual_scale: Option<f32>,
}

impl BlockLayout {
    /// Llama's pre-norm block: `h = x + attn(input_layernorm(x));
    /// out = h + mlp(post_attention_layernorm(h))`.
    pub fn pre_norm(norm: NormKind, eps: f32) -> BlockLayout {
        BlockLayout {
            norm,
            eps,
            pre_attn: Some("input_layernorm"),
            post_attn: None,
            pre_ffn: Some("post_attention_layernorm"),
            post_ffn: None,
            parallel: false,
            residual_scale: None,
        }
    }
}

/// The norms of a [`DecoderBlock`] (see [`BlockLayout`] for where each sits).
#[derive(Debug, Clone, Default)]
pub struct BlockNorms {
    /// before attention
    pub pre_attn: Option<Norm>,
    /// on attention's output
    pub post_attn: Option<Norm>,
    /// before the feed-forward part
    pub pre_ffn: Option<Norm>,
    /// on the feed-forward part's output
    pub post_ffn: Option<Norm>,
}

/// One decoder block: attention, a feed-forward part, the norms around
/// them and the residual adds (see [`BlockLayout`]).
#[derive(Debug)]
pub struct DecoderBlock {
    /// self-attention
    pub attn: Attention,
    /// the feed-forward part
    pub ffn: Box<dyn FeedForward>,
    /// the norms
    pub norms: BlockNorms,
    /// attention and feed-forward side by side
    pub parallel: bool,
    /// scale of both updates
    pub residual_scale: Option<f32>,
}

fn norm_of(n: &Option<Norm>, x: Array) -> Result<Array> {
    match n {
        Some(n) => n.forward(&x),
        None => Ok(x),
    }
}

impl DecoderBlock {
    /// Loads the block under `prefix` (e.g. `model.layers.3`): attention from
    /// `{prefix}.self_attn` (shape `attention`, rotated by `rope`), the norms
    /// `layout` names, and the feed-forward part `ffn` the family loaded.
    pub fn load(
        w: &dyn Weights,
        prefix: &str,
        layout: &BlockLayout,
        attention: &AttentionShape,
        rope: Rope,
        ffn: Box<dyn FeedForward>,
    ) -> Result<DecoderBlock> {
        let h = attention.hidden;
        let norm =
            |n: Option<&str>| n.map(|n| layout.norm.load(w, &format!("{prefix}.{n}"), h, layout.eps)).transpose();
        Ok(DecoderBlock {
            attn: Attention::load(w, &format!("{prefix}.self_attn"), attention, rope)?,
            ffn,
            norms: BlockNorms {
                pre_attn: norm(layout.pre_attn)?,
                post_attn: norm(layout.post_attn)?,
                pre_ffn: norm(layout.pre_ffn)?,
                post_ffn: norm(layout.post_ffn)?,
            },
            parallel: layout.parallel,
            residual_scale: layout.residual_scale,
        })
    }

    /// Runs the block through cache `slot`.
    pub fn forward(&self, x: &Array, caches: &mut Caches<'_>, slot: usize) -> Result<Array> {
        let n = &self.norms;
        let scaled = |u: Array| match self.residual_scale {
            Some(s) => u.mul_s(s as f64),
            None => Ok(u),
        };
        if self.parallel {
            let normed = norm_of(&n.pre_attn, x.clone())?;
            let a = self.attn.forward(&normed, caches, slot)?;
            let f = self.ffn.forward(&normed)?;
            return a.add(&f)?.add(x);
        }
        let a = self.attn.forward(&norm_of(&n.pre_attn, x.clone())?, caches, slot)?;
        let h = x.add(&scaled(norm_of(&n.post_attn, a)?)?)?;
        let f = self.ffn.forward(&norm_of(&n.pre_ffn, h.clone())?)?;
        h.add(&scaled(norm_of(&n.post_ffn, f)?)?)
    }
}

/// What a model does to its logits after the head, in this order.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LogitOps {
    /// Multiplied by this (Cohere's `logit_scale`).
    pub scale: Option<f32>,
    /// Divided by this (Granite's `logits_scaling`).
    pub divide: Option<f32>,
    /// Soft-capped: `tanh(x / c) · c` (Gemma 2's `final_logit_softcapping`).
    pub softcap: Option<f32>,
}

impl LogitOps {
    /// Applies them to `x`.
    pub fn apply(&self, x: Array) -> Result<Array> {
        let mut x = x;
        if let Some(s) = self.scale {
            x = x.mul_s(s as f64)?;
        }
        if let Some(d) = self.divide {
            x = x.div_s(d as f64)?;
        }
        if let Some(c) = self.softcap {
            x = x.div_s(c as f64)?.tanh()?.mul_s(c as f64)?;
        }
        Ok(x)
    }
}

/// The model-wide parts of a [`DecoderLm`], from the model's config.
#[derive(Debug, Clone, PartialEq)]
pub struct DecoderSpec {
    /// Vocabulary (embedding rows, logits).
    pub vocab: i32,
    /// Width of the residual stream.
    pub hidden: i32,
    /// Decoder blocks.
    pub layers: i32,
    /// Output head tied to the embedding (no `lm_head` tensor).
    pub tied: bool,
    /// The head of its own has a bias (`lm_head.bias`, Phi's), required then.
    pub head_bias: bool,
    /// The final norm's kind and epsilon.
    pub norm: NormKind,
    /// Its epsilon.
    pub eps: f32,
    /// Its name under `{prefix}model.` (`norm` in most families).
    pub final_norm: &'static str,
    /// Where the text model's tensors live: `""` (`model.*`, `lm_head`), or
    /// e.g. `language_model.` inside a multimodal checkpoint.
    pub prefix: &'static str,
    /// The embeddings multiplied by this (Gemma's `√hidden`, Granite's
    /// `embedding_multiplier`), in the activations' type.
    pub embed_scale: Option<f32>,
    /// What happens to the logits.
    pub logits: LogitOps,
}

impl DecoderSpec {
    /// A plain decoder: `model.*` and `lm_head` (or tied), final norm
    /// `model.norm` of `norm` kind, nothing scaled.
    pub fn new(vocab: i32, hidden: i32, layers: i32, tied: bool, norm: NormKind, eps: f32) -> DecoderSpec {
        DecoderSpec {
            vocab,
            hidden,
            layers,
            tied,
            head_bias: false,
            norm,
            eps,
            final_norm: "norm",
            prefix: "",
            embed_scale: None,
            logits: LogitOps::default(),
        }
    }
}

/// A decoder-only language model: embedding, blocks (one cache slot each),
/// final norm, and the output head (its own or the tied embedding).
#[derive(Debug)]
pub struct DecoderLm {
    /// token embedding
    pub embed: Embedding,
    /// blocks (of a pipeline split: this rank's, model layers `stage.layers`)
    pub blocks: Vec<DecoderBlock>,
    /// this rank's stage of a pipeline split
    pub stage: Option<Stage>,
    /// width of the residual stream
    pub hidden: i32,
    /// final norm
    pub norm: Norm,
    /// output head
    pub head: OutputHead,
    /// scale of the embeddings
    pub embed_scale: Option<f32>,
    /// what happens to the logits
    pub logits: LogitOps,
}

/// The shape of a Llama-style [`DecoderLm`] (RMS norms, pre-norm blocks,
/// SwiGLU MLPs), from the model's config.
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
        let spec = DecoderSpec::new(shape.vocab, h, shape.layers, shape.tied, NormKind::Rms, eps);
        let layout = BlockLayout::pre_norm(NormKind::Rms, eps);
        DecoderLm::build(w, &spec, |_, p| {
            let mlp = GatedMlp::load(w, &format!("{p}.mlp"), h, shape.intermediate)?;
            DecoderBlock::load(w, p, &layout, &shape.attention, rope.clone(), Box::new(mlp))
        })
    }

    /// Loads a decoder of `spec`: the embedding, this rank's blocks (each
    /// made by `block(i, prefix)` with `prefix` = `{spec.prefix}model.layers.{i}`),
    /// the final norm and the head.
    pub fn build(
        w: &dyn Weights,
        spec: &DecoderSpec,
        block: impl Fn(i32, &str) -> Result<DecoderBlock>,
    ) -> Result<DecoderLm> {
        let (h, pre) = (spec.hidden, spec.prefix);
        let stage = Stage::of(w, spec.layers)?;
        let blocks = (0..spec.layers)
            .filter(|&i| Stage::holds(stage.as_ref(), i as usize))
            .map(|i| block(i, &format!("{pre}model.layers.{i}")))
            .collect::<Result<Vec<_>>>()?;
        let embed = Embedding::load(w, &format!("{pre}model.embed_tokens"), spec.vocab, h)?;
        Ok(DecoderLm {
            head: OutputHead::load_with_bias(
                w,
                &format!("{pre}lm_head"),
                &embed,
                spec.tied,
                h,
                spec.vocab,
                spec.head_bias,
            )?,
            embed,
            blocks,
            stage,
            hidden: h,
            norm: spec.norm.load(w, &format!("{pre}model.{}", spec.final_norm), h, spec.eps)?,
            embed_scale: spec.embed_scale,
            logits: spec.logits,
        })
    }

    /// The element type the embeddings are widened to, if any: float32 for
    /// half-precision embeddings feeding float32 norms. A GGUF file is that
    /// case (its norms are float32, its quantized embedding dequantizes to
    /// float16), and llama.cpp computes its activations in float32: rounding
    /// the embeddings to half precision moved Gemma 3 270M's logits by up to
    /// 0.6 from llama.cpp's. Otherwise the embeddings stay as they come.
    fn widened(&self) -> Option<mlx::Dtype> {
        use mlx::Dtype::{BF16, F16, F32};
        let half = matches!(self.embed.dtype(), F16 | BF16);
        (half && self.norm.dtype() == Some(F32)).then_some(F32)
    }

    /// The input's embeddings, scaled; half-precision ones feeding float32
    /// norms are widened to float32 first (a GGUF file's, as llama.cpp computes).
    pub fn embeddings(&self, input: &crate::family::Input) -> Result<Array> {
        let mut e = input.embed(&self.embed)?;
        if let Some(dt) = self.widened().filter(|&dt| e.dtype() != dt) {
            e = e.astype(dt)?;
        }
        match self.embed_scale {
            Some(s) => e.mul_s(s as f64),
            None => Ok(e),
        }
    }

    /// The residual stream entering this rank's first block: the input's
    /// embeddings on the first stage of a pipeline split (or unsplit), what
    /// the previous stage sent otherwise.
    pub fn enter(&self, input: &crate::family::Input) -> Result<Array> {
        let shape = [input.tokens.dim(0), input.tokens.dim(1), self.hidden];
        let dtype = self.widened().unwrap_or(self.embed.dtype());
        Stage::enter(self.stage.as_ref(), &shape, dtype, || self.embeddings(input))
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
        let mut h = self.enter(input)?;
        let first = stage.map_or(0, |s| s.layers.start);
        for (i, b) in self.blocks.iter().enumerate() {
            h = b.forward(&h, caches, first + i)?;
        }
        let h = self.norm.forward(&Stage::leave(stage, h, input)?)?;
        lm_output(h, input.logits, input.want_hidden, |x| self.logits.apply(self.head.forward(x)?))
    }
}
