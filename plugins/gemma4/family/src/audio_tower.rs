//! Gemma 4's audio tower (a Universal-Speech-Model conformer) and its
//! projector into the text model: two stride-2 conv blocks over the log-mel
//! features (conv, channel layer norm, ReLU), a linear to the tower width,
//! conformer blocks (half-step feed-forward, chunked local attention with
//! relative positions and soft-capped logits, a light causal depthwise
//! convolution, a second feed-forward), an output projection, then a
//! scale-free RMS norm and the projection to the text width. One clip runs
//! at a time (batch 1); padded frames are masked as the reference masks
//! them, so a clip's rows do not depend on the padding.

use crate::clipped::ClippedLinear;
use mlx::fast::{layer_norm, rms_norm};
use mlx::nn::{silu, Kind, Linear, Weights};
use mlx::{Array, Dtype, Error, Result};
use plugin_api::config::{nullable, parse};
use serde::Deserialize;
use serde_json::Value;

/// Mel bins of the tower's input.
const MEL_BINS: i32 = 128;

plugin_api::config_defaults! {
    channels / channels_or_null: Vec<i32> = vec![128, 32];
    d1024 / d1024_or_null: i32 = 1024;
    twelve / twelve_or_null: i32 = 12;
    eight / eight_or_null: i32 = 8;
    five / five_or_null: i32 = 5;
    half / half_or_null: f64 = 0.5;
    thirteen / thirteen_or_null: i32 = 13;
    cap / cap_or_null: f64 = 50.0;
    invalid / invalid_or_null: f64 = -1e9;
    eps / eps_or_null: f32 = 1e-6;
    clip / clip_or_null: f64 = 1e10;
    // A null width reads as absent too: the default projection.
    proj / proj_or_null: Option<i32> = Some(1536);
}

/// `audio_config` as written; absent (or null) fields take mlx-vlm
/// 0.7.10's defaults (the E2B/E4B tower).
#[derive(Debug, Clone, Deserialize)]
struct Written {
    #[serde(default = "channels", deserialize_with = "channels_or_null")]
    subsampling_conv_channels: Vec<i32>,
    #[serde(default = "d1024", deserialize_with = "d1024_or_null")]
    hidden_size: i32,
    #[serde(default = "twelve", deserialize_with = "twelve_or_null")]
    num_hidden_layers: i32,
    #[serde(default = "eight", deserialize_with = "eight_or_null")]
    num_attention_heads: i32,
    #[serde(default = "five", deserialize_with = "five_or_null")]
    conv_kernel_size: i32,
    #[serde(default = "half", deserialize_with = "half_or_null")]
    residual_weight: f64,
    #[serde(default = "twelve", deserialize_with = "twelve_or_null")]
    attention_chunk_size: i32,
    #[serde(default = "thirteen", deserialize_with = "thirteen_or_null")]
    attention_context_left: i32,
    #[serde(default, deserialize_with = "nullable")]
    attention_context_right: i32,
    #[serde(default = "cap", deserialize_with = "cap_or_null")]
    attention_logit_cap: f64,
    #[serde(default = "invalid", deserialize_with = "invalid_or_null")]
    attention_invalid_logits_value: f64,
    #[serde(default = "eps", deserialize_with = "eps_or_null")]
    rms_norm_eps: f32,
    #[serde(default = "clip", deserialize_with = "clip_or_null")]
    gradient_clipping: f64,
    #[serde(default = "proj", deserialize_with = "proj_or_null")]
    output_proj_dims: Option<i32>,
}

/// `audio_config`, the fields the tower reads (absent fields take mlx-vlm
/// 0.7.10's defaults: the E2B/E4B tower).
#[derive(Debug, Clone)]
pub struct ConformerConfig {
    /// Width of the conformer.
    pub hidden_size: i32,
    /// Conformer blocks.
    pub num_hidden_layers: i32,
    /// Attention heads.
    pub num_attention_heads: i32,
    /// Output channels of the two conv blocks.
    pub conv_channels: [i32; 2],
    /// Width of the light convolution's kernel.
    pub conv_kernel_size: i32,
    /// Weight of the feed-forward branches.
    pub residual_weight: f64,
    /// Queries per attention chunk.
    pub chunk: i32,
    /// Keys before a query it sees, itself included (`attention_context_left`).
    pub context_left: i32,
    /// Keys after a query it sees (`attention_context_right`).
    pub context_right: i32,
    /// Soft cap of the attention logits.
    pub logit_cap: f64,
    /// The logit masked keys get.
    pub invalid_logit: f64,
    /// RMS / layer norm epsilon.
    pub rms_norm_eps: f32,
    /// Bound activations are clipped to.
    pub gradient_clipping: f64,
    /// Width of the output projection (`None`: no projection).
    pub output_proj_dims: Option<i32>,
}

impl ConformerConfig {
    /// From `audio_config` (`None` when the checkpoint has none).
    pub fn parse(c: &Value) -> Result<Option<ConformerConfig>> {
        let Some(a) = c.get("audio_config").filter(|v| v.is_object()) else { return Ok(None) };
        let w: Written = parse(a)?;
        let [c0, c1] = w.subsampling_conv_channels[..] else {
            return Err(Error::msg("config: audio_config.subsampling_conv_channels must have two entries"));
        };
        let cfg = ConformerConfig {
            hidden_size: w.hidden_size,
            num_hidden_layers: w.num_hidden_layers,
            num_attention_heads: w.num_attention_heads,
            conv_channels: [c0, c1],
            conv_kernel_size: w.conv_kernel_size,
            residual_weight: w.residual_weight,
            chunk: w.attention_chunk_size,
            context_left: w.attention_context_left,
            context_right: w.attention_context_right,
            logit_cap: w.attention_logit_cap,
            invalid_logit: w.attention_invalid_logits_value,
            rms_norm_eps: w.rms_norm_eps,
            gradient_clipping: w.gradient_clipping,
            output_proj_dims: w.output_proj_dims,
        };
        let positive = [cfg.hidden_size, cfg.num_attention_heads, c0, c1, cfg.conv_kernel_size, cfg.chunk];
        if positive.iter().any(|&v| v <= 0)
            || cfg.num_hidden_layers < 0
            || cfg.context_left < 0
            || cfg.context_right < 0
            || cfg.hidden_size % cfg.num_attention_heads != 0
            || cfg.hidden_size % 2 != 0
            || cfg.output_proj_dims.is_some_and(|d| d <= 0)
        {
            return Err(Error::msg(
                "config: audio_config: sizes must be positive, hidden_size even and a multiple of num_attention_heads",
            ));
        }
        Ok(Some(cfg))
    }

    fn head_dim(&self) -> i32 {
        self.hidden_size / self.num_attention_heads
    }

    /// Keys before a query (itself excluded) a chunk's context holds.
    fn past(&self) -> i32 {
        (self.context_left - 1).max(0)
    }

    /// Keys per chunk context.
    fn context(&self) -> i32 {
        self.chunk + self.past() + self.context_right
    }

    /// Width of the tower's output rows.
    pub fn output_dims(&self) -> i32 {
        self.output_proj_dims.unwrap_or(self.hidden_size)
    }
}

/// Macaron feed-forward: norm, 4x SiLU MLP, norm, half-weighted residual.
#[derive(Debug, Clone)]
struct FeedForward {
    pre_norm: Array,
    up: ClippedLinear,
    down: ClippedLinear,
    post_norm: Array,
}

/// Chunked local self-attention with relative positions.
#[derive(Debug, Clone)]
struct Attention {
    q: ClippedLinear,
    k: ClippedLinear,
    v: ClippedLinear,
    post: ClippedLinear,
    /// The projected sinusoids of the relative offsets, `[N, H, span]`
    /// (input independent: computed once, with the reference's ops).
    relative: Array,
    /// The queries' per-feature scale, `softplus(per_dim_scale) · q_scale`.
    q_scale: Array,
}

/// Norm, GLU, causal depthwise conv, norm, SiLU, linear.
#[derive(Debug, Clone)]
struct LightConv {
    pre_norm: Array,
    start: ClippedLinear,
    depthwise: Array,
    conv_norm: Array,
    end: ClippedLinear,
}

#[derive(Debug, Clone)]
struct Block {
    ff1: FeedForward,
    attn: Attention,
    conv: LightConv,
    ff2: FeedForward,
    norm_pre_attn: Array,
    norm_post_attn: Array,
    norm_out: Array,
}

/// The audio tower and its projector.
#[derive(Debug, Clone)]
pub struct AudioTower {
    cfg: ConformerConfig,
    convs: [(Array, Array); 2],
    input_proj: Linear,
    blocks: Vec<Block>,
    output_proj: Option<Linear>,
    projection: Linear,
    /// Which keys of a chunk's context each of its queries sees.
    causal: Array,
}

impl crate::media::Tower for AudioTower {
    fn embed(&self, item: &plugin_api::media::MediaInput) -> Result<Array> {
        let valid = item.extra.first().ok_or_else(|| Error::msg("audio input without its frame mask"))?;
        AudioTower::embed(self, &item.pixels, valid, item.tokens)
    }
}

impl AudioTower {
    /// Whether the checkpoint holds the tower and its projector (a
    /// checkpoint without them serves text and images).
    pub fn present(w: &dyn Weights) -> bool {
        ["audio_tower.subsample_conv_projection.layer0.conv.weight", "embed_audio.embedding_projection.weight"]
            .iter()
            .all(|n| w.get(n).is_some())
    }

    /// Loads `audio_tower.*` and `embed_audio.*` (projecting to `text_hidden`).
    pub fn load(cfg: &ConformerConfig, w: &dyn Weights, text_hidden: i32) -> Result<AudioTower> {
        let d = cfg.hidden_size;
        let t = |n: &str, shape: &[i32]| w.tensor(n, shape, Kind::Float);
        let cl = |p: &str, i: i32, o: i32| ClippedLinear::load_bounds_if_present(w, p, i, o);
        let sp = "audio_tower.subsample_conv_projection";
        let [c0, c1] = cfg.conv_channels;
        let convs = [
            (t(&format!("{sp}.layer0.conv.weight"), &[c0, 3, 3, 1])?, t(&format!("{sp}.layer0.norm.weight"), &[c0])?),
            (t(&format!("{sp}.layer1.conv.weight"), &[c1, 3, 3, c0])?, t(&format!("{sp}.layer1.norm.weight"), &[c1])?),
        ];
        let freq = (0..2).fold(MEL_BINS, |f, _| (f + 2 - 3) / 2 + 1);
        let input_proj = Linear::load(w, &format!("{sp}.input_proj_linear"), freq * c1, d)?;
        let ff = |p: &str| -> Result<FeedForward> {
            Ok(FeedForward {
                pre_norm: t(&format!("{p}.pre_layer_norm.weight"), &[d])?,
                up: cl(&format!("{p}.ffw_layer_1"), d, 4 * d)?,
                down: cl(&format!("{p}.ffw_layer_2"), 4 * d, d)?,
                post_norm: t(&format!("{p}.post_layer_norm.weight"), &[d])?,
            })
        };
        let blocks = (0..cfg.num_hidden_layers)
            .map(|i| {
                let p = format!("audio_tower.layers.{i}");
                let a = format!("{p}.self_attn");
                let c = format!("{p}.lconv1d");
                Ok(Block {
                    ff1: ff(&format!("{p}.feed_forward1"))?,
                    attn: Attention {
                        q: cl(&format!("{a}.q_proj"), d, d)?,
                        k: cl(&format!("{a}.k_proj"), d, d)?,
                        v: cl(&format!("{a}.v_proj"), d, d)?,
                        post: cl(&format!("{a}.post"), d, d)?,
                        relative: relative_embedding(cfg, w, &format!("{a}.relative_k_proj"))?,
                        q_scale: {
                            let p = t(&format!("{a}.per_dim_scale"), &[cfg.head_dim()])?;
                            let q_scale = (cfg.head_dim() as f64).powf(-0.5) / std::f64::consts::LN_2;
                            p.logaddexp(&p.scalar_like(0.0)?)?.mul_s(q_scale)?
                        },
                    },
                    conv: LightConv {
                        pre_norm: t(&format!("{c}.pre_layer_norm.weight"), &[d])?,
                        start: cl(&format!("{c}.linear_start"), d, 2 * d)?,
                        depthwise: t(&format!("{c}.depthwise_conv1d.weight"), &[d, cfg.conv_kernel_size, 1])?,
                        conv_norm: t(&format!("{c}.conv_norm.weight"), &[d])?,
                        end: cl(&format!("{c}.linear_end"), d, d)?,
                    },
                    ff2: ff(&format!("{p}.feed_forward2"))?,
                    norm_pre_attn: t(&format!("{p}.norm_pre_attn.weight"), &[d])?,
                    norm_post_attn: t(&format!("{p}.norm_post_attn.weight"), &[d])?,
                    norm_out: t(&format!("{p}.norm_out.weight"), &[d])?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let output_proj = cfg
            .output_proj_dims
            .map(|o| Linear::load_with_bias(w, "audio_tower.output_proj", d, o, true))
            .transpose()?;
        Ok(AudioTower {
            cfg: cfg.clone(),
            convs,
            input_proj,
            blocks,
            output_proj,
            projection: Linear::load(w, "embed_audio.embedding_projection", cfg.output_dims(), text_hidden)?,
            causal: causal_valid(cfg)?,
        })
    }

    /// The text-model rows of one clip: `features` `[1, T, 128]` log-mel,
    /// `valid` `[1, T]` (true for frames inside the clip) → the first
    /// `tokens` rows of the projected tower output `[tokens, text_hidden]`
    /// (as the reference's scatter takes them; it wraps round when a clip
    /// gives fewer rows than placeholders, and so does this).
    pub fn embed(&self, features: &Array, valid: &Array, tokens: u32) -> Result<Array> {
        let (enc, _) = self.encode(features, valid)?;
        let n = rms_norm(&enc, None, self.cfg.rms_norm_eps)?;
        let rows = self.projection.forward(&n)?.squeeze(&[0])?;
        crate::media::first_rows(&rows, tokens)
    }

    /// The tower's output `[1, T/4, output_dims]` (padded rows zero) and
    /// its padding mask (true: padding).
    pub fn encode(&self, features: &Array, valid: &Array) -> Result<(Array, Array)> {
        let c = &self.cfg;
        // Zeros as the reference's Python `0.0`: of the other operand's dtype.
        let zero = |x: &Array| x.scalar_like(0.0);
        let mut pad = valid.logical_not()?;
        let mut x = features.expand_dims(&[-1])?;
        for (conv, norm) in &self.convs {
            x = mlx::where_(&pad.expand_dims(&[2, 3])?, &zero(&x)?, &x)?;
            x = x.pad(&[1, 2], &[1, 1], &[1, 1], &zero(&x)?, "constant")?;
            x = mlx::conv2d(&x, conv, [2, 2], [0, 0], [1, 1], 1)?;
            let t_out = x.dim(1);
            let t_in = pad.dim(1);
            pad = pad.slice(&[0, 0], &[1, t_in], &[1, 2])?.slice_axis(1, 0, t_out)?;
            let n = layer_norm(&x, Some(norm), None, c.rms_norm_eps)?;
            x = n.maximum(&zero(&n)?)?;
        }
        let (b, t, f, ch) = (x.dim(0), x.dim(1), x.dim(2), x.dim(3));
        x = self.input_proj.forward(&x.reshape(&[b, t, f * ch])?)?;
        let keep = pad.logical_not()?;
        let ctx = Context::new(&self.cfg, &keep, &self.causal)?;
        let keep_rows = keep.expand_dims(&[-1])?.astype(x.dtype())?;
        for blk in &self.blocks {
            x = self.block(blk, &x, &keep_rows, &ctx)?;
        }
        if let Some(o) = &self.output_proj {
            x = o.forward(&x)?;
        }
        let x = mlx::where_(&pad.expand_dims(&[-1])?, &zero(&x)?, &x)?;
        Ok((x, pad))
    }

    fn clip(&self, x: &Array) -> Result<Array> {
        let g = self.cfg.gradient_clipping;
        // The checkpoints' bound (1e10) is one no finite activation of a
        // working model reaches: skipped then, which saves eight kernels a
        // block; a tighter bound is applied as the reference applies it.
        if g >= 1e10 {
            return Ok(x.clone());
        }
        x.clip(Some(&x.scalar_like(-g)?), Some(&x.scalar_like(g)?))
    }

    fn norm(&self, x: &Array, w: &Array) -> Result<Array> {
        rms_norm(x, Some(w), self.cfg.rms_norm_eps)
    }

    fn feed_forward(&self, ff: &FeedForward, x: &Array) -> Result<Array> {
        // The reference's feed-forward norms use their default epsilon
        // (1e-6), not the config's.
        let h = rms_norm(&self.clip(x)?, Some(&ff.pre_norm), 1e-6)?;
        let h = ff.down.forward(&silu(&ff.up.forward(&h)?)?)?;
        let h = rms_norm(&self.clip(&h)?, Some(&ff.post_norm), 1e-6)?;
        x.add(&h.mul_s(self.cfg.residual_weight)?)
    }

    /// One conformer block; `keep_rows` `[1, T, 1]` zeroes padded rows.
    fn block(&self, blk: &Block, x: &Array, keep_rows: &Array, ctx: &Context) -> Result<Array> {
        let x = self.feed_forward(&blk.ff1, x)?;
        let h = rms_norm(&self.clip(&x)?, Some(&blk.norm_pre_attn), 1e-6)?;
        let h = self.clip(&self.attention(&blk.attn, &h, ctx)?)?;
        let x = x.add(&rms_norm(&h, Some(&blk.norm_post_attn), 1e-6)?)?;
        let x = x.mul(keep_rows)?;
        let x = self.light_conv(&blk.conv, &x)?;
        let x = self.feed_forward(&blk.ff2, &x)?;
        rms_norm(&self.clip(&x)?, Some(&blk.norm_out), 1e-6)
    }

    fn light_conv(&self, lc: &LightConv, x: &Array) -> Result<Array> {
        let d = self.cfg.hidden_size;
        let h = self.norm(x, &lc.pre_norm)?;
        let h = lc.start.forward(&h)?;
        let parts = h.split(2, -1)?;
        let h = parts[0].mul(&parts[1].sigmoid()?)?;
        let k = self.cfg.conv_kernel_size;
        let h = h.pad(&[1], &[k - 1], &[0], &h.scalar_like(0.0)?, "constant")?;
        let h = mlx::conv1d(&h, &lc.depthwise, 1, 0, 1, d)?;
        let h = self.norm(&self.clip(&h)?, &lc.conv_norm)?;
        lc.end.forward(&silu(&h)?)?.add(x)
    }

    fn attention(&self, a: &Attention, x: &Array, cx: &Context) -> Result<Array> {
        let c = &self.cfg;
        let (t, nh, hd, w) = (x.dim(1), c.num_attention_heads, c.head_dim(), c.chunk);
        let qkv = |l: &ClippedLinear| l.forward(x)?.astype(Dtype::F32)?.reshape(&[1, t, nh, hd]);
        let k_scale = (1.0 + std::f64::consts::E).ln() / std::f64::consts::LN_2;
        let q = qkv(&a.q)?.mul(&a.q_scale)?;
        let k = qkv(&a.k)?.mul_s(k_scale)?;
        let v = qkv(&a.v)?;
        // Queries in chunks of W, keys and values in each chunk's context.
        let (u, ctx) = (cx.chunks, c.context());
        let zero = Array::f32(0.0);
        let q = q.pad(&[1], &[0], &[u * w - t], &zero, "constant")?.reshape(&[1, u, w, nh, hd])?;
        let k = cx.blocks(&k, &zero)?;
        let v = cx.blocks(&v, &zero)?;
        let qp = q.transpose(&[0, 3, 1, 2, 4])?;
        let term_ac = qp.matmul(&k.transpose(&[0, 3, 1, 4, 2])?)?;
        let term_bd = self.relative_logits(a, &qp, u, ctx)?;
        let logits = term_ac.add(&term_bd)?;
        let logits = logits.div_s(c.logit_cap)?.tanh()?.mul_s(c.logit_cap)?;
        let logits = mlx::where_(&cx.visible, &logits, &logits.scalar_like(c.invalid_logit)?)?;
        let probs = logits.softmax(&[-1], false)?;
        let out = probs.matmul(&v.transpose(&[0, 3, 1, 2, 4])?)?; // [1, N, U, W, H]
        let out = out.transpose(&[0, 2, 3, 1, 4])?.reshape(&[1, u * w, nh * hd])?.slice_axis(1, 0, t)?;
        a.post.forward(&out)
    }

    /// The relative-position term of the logits `[1, N, U, W, C]`: queries
    /// against the projected sinusoids of the offsets `past ..= -future`,
    /// shifted so each query's offsets line up with its context's keys.
    fn relative_logits(&self, a: &Attention, qp: &Array, u: i32, ctx: i32) -> Result<Array> {
        let c = &self.cfg;
        let (nh, hd, w) = (c.num_attention_heads, c.head_dim(), c.chunk);
        let span = c.past() + c.context_right + 1;
        let bd = qp.reshape(&[1, nh, u * w, hd])?.matmul(&a.relative)?.reshape(&[1, nh, u, w, span])?;
        let bd = bd.pad(&[4], &[0], &[ctx + 1 - span], &Array::f32(0.0), "constant")?;
        bd.reshape(&[1, nh, u, w * (ctx + 1)])?.slice_axis(3, 0, w * ctx)?.reshape(&[1, nh, u, w, ctx])
    }
}

/// Which keys of a chunk's context each of its queries sees: `[W, C]`.
fn causal_valid(c: &ConformerConfig) -> Result<Array> {
    let (w, ctx, past, future) = (c.chunk, c.context(), c.past(), c.context_right);
    let mut m = Vec::with_capacity((w * ctx) as usize);
    for q in 0..w {
        for k in 0..ctx {
            let dist = q + past - k;
            m.push((dist >= 0 && dist < past) || (dist < 0 && -dist < future));
        }
    }
    Array::from_slice(&m, &[w, ctx])
}

/// The projected sinusoidal embeddings of the relative offsets `past ..=
/// -future`, `[N, H, span]` f32, as the reference computes them in every
/// call (cast to `relative_k_proj`'s dtype before the projection).
fn relative_embedding(c: &ConformerConfig, w: &dyn Weights, prefix: &str) -> Result<Array> {
    let (nh, hd, d) = (c.num_attention_heads, c.head_dim(), c.hidden_size);
    let proj = Linear::load(w, prefix, d, d)?;
    let dtype = match w.get(&format!("{prefix}.weight")) {
        Some(t) if t.dtype().is_float() => t.dtype(),
        _ => Dtype::F32,
    };
    let span = c.past() + c.context_right + 1;
    let half = d / 2;
    let inc = (10000f64).ln() / ((half - 1).max(1) as f64);
    let inv = mlx::arange(0.0, half as f64, 1.0, Dtype::F32)?.mul_s(-inc)?.exp()?;
    let pos = mlx::arange(c.past() as f64, -(c.context_right as f64) - 1.0, -1.0, Dtype::F32)?;
    let scaled = pos.expand_dims(&[1])?.mul(&inv.expand_dims(&[0])?)?;
    let signal = mlx::concatenate(&[&scaled.sin()?, &scaled.cos()?], -1)?;
    let emb = proj.forward(&signal.astype(dtype)?)?;
    emb.astype(Dtype::F32)?.reshape(&[span, nh, hd])?.transpose(&[1, 2, 0])
}

/// What every layer's attention shares for one clip: the gather of each
/// chunk's context and which of its keys each query sees.
struct Context {
    /// Chunks of queries.
    chunks: i32,
    /// Positions each chunk's context reads, `[U·C]`, in the padded sequence.
    index: Array,
    /// Padding of the sequence before the gather: `(past, after)`.
    pad: (i32, i32),
    /// Keys visible to each query: `[1, 1, U, W, C]`.
    visible: Array,
}

impl Context {
    fn new(c: &ConformerConfig, keep: &Array, causal: &Array) -> Result<Context> {
        let (w, ctx, past) = (c.chunk, c.context(), c.past());
        let t = keep.dim(1);
        let pad = (past, c.context_right + w - 1);
        let u = (t + pad.0 + pad.1 - ctx) / w + 1;
        let idx: Vec<i32> = (0..u).flat_map(|b| (0..ctx).map(move |o| b * w + o)).collect();
        let mut cx = Context { chunks: u, index: Array::from_slice(&idx, &[u * ctx])?, pad, visible: causal.clone() };
        let seen = cx.blocks(keep, &Array::from_slice(&[false], &[])?)?;
        cx.visible = seen.reshape(&[1, 1, u, 1, ctx])?.logical_and(&causal.reshape(&[1, 1, 1, w, ctx])?)?;
        Ok(cx)
    }

    /// `[1, T, ...]` → each chunk's context `[1, U, C, ...]`: `past`
    /// positions before the chunk, the chunk, `future` after.
    fn blocks(&self, x: &Array, fill: &Array) -> Result<Array> {
        let x = x.pad(&[1], &[self.pad.0], &[self.pad.1], fill, "constant")?;
        let g = x.take(&self.index, 1)?;
        let mut shape = vec![1, self.chunks, self.index.dim(0) / self.chunks];
        shape.extend_from_slice(&x.shape()[2..]);
        g.reshape(&shape)
    }
}
