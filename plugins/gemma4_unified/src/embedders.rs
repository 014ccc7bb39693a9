//! gemma4_unified's encoder-free media inputs (mlx-vlm 0.7.10's
//! `gemma4_unified`): images resized as Gemma 4's processor resizes them,
//! cut into 48-pixel patches that a layer-normed linear embeds with a
//! learned (column, row) position table; audio as raw 16 kHz samples, 640
//! per token, through a scale-free RMS norm and a linear. No tower runs:
//! each patch or frame is one row.

use famlx_gemma4::audio::{check_clip, placeholders, processor_setting, tokens_for};
use famlx_gemma4::image::ImageConfig;
use famlx_gemma4::media::{first_rows, Tower};
use mlx::fast::rms_norm;
use mlx::nn::{Kind, LayerNorm, Linear, Weights};
use mlx::{Array, Error, Result};
use plugin_api::config::parse;
use plugin_api::media::MediaInput;
use plugin_api::{Placeholders, RawAudio, RawImage};
use serde::Deserialize;
use serde_json::Value;

/// The layer norms' epsilon (MLX's `nn.LayerNorm` default, which the
/// reference keeps).
const LAYER_NORM_EPS: f32 = 1e-5;

plugin_api::config_defaults! {
    sixteen / sixteen_or_null: u32 = 16;
    three / three_or_null: u32 = 3;
    embed / embed_or_null: i32 = 3840;
    posemb / posemb_or_null: i32 = 1120;
    samples / samples_or_null: i32 = 640;
    eps / eps_or_null: f32 = 1e-6;
}

/// `vision_config` as written, the fields the embedder reads; absent (or
/// null) fields take mlx-vlm's defaults.
#[derive(Debug, Clone, Deserialize)]
struct VisionWritten {
    #[serde(default = "sixteen", deserialize_with = "sixteen_or_null")]
    patch_size: u32,
    #[serde(default = "three", deserialize_with = "three_or_null")]
    pooling_kernel_size: u32,
    /// `patch_size × pooling_kernel_size` when absent.
    model_patch_size: Option<u32>,
    #[serde(default = "embed", deserialize_with = "embed_or_null")]
    mm_embed_dim: i32,
    #[serde(default = "posemb", deserialize_with = "posemb_or_null")]
    mm_posemb_size: i32,
    /// `mm_embed_dim` when absent.
    output_proj_dims: Option<i32>,
    #[serde(default = "eps", deserialize_with = "eps_or_null")]
    rms_norm_eps: f32,
}

/// `audio_config` as written, the fields the embedder reads.
#[derive(Debug, Clone, Deserialize)]
struct AudioWritten {
    #[serde(default = "samples", deserialize_with = "samples_or_null")]
    audio_samples_per_token: i32,
    /// `audio_samples_per_token` when absent.
    output_proj_dims: Option<i32>,
    #[serde(default = "eps", deserialize_with = "eps_or_null")]
    rms_norm_eps: f32,
}

/// `vision_config` of a unified checkpoint, with the image processor's
/// settings.
#[derive(Debug, Clone)]
pub struct UnifiedVision {
    /// Resize and rescale as Gemma 4's image processor (the soft-token
    /// budget is the processor's `max_soft_tokens`).
    pub image: ImageConfig,
    /// Pixels per model patch side (48: 16-pixel patches pooled 3x3).
    pub model_patch: u32,
    /// Width of the patch embedding.
    pub embed_dim: i32,
    /// Rows of the position table.
    pub posemb_size: i32,
    /// Width of the embedder's output rows.
    pub output_dims: i32,
    /// Epsilon of the projector's norm.
    pub rms_norm_eps: f32,
}

impl UnifiedVision {
    /// From config.json (`None` without `vision_config`).
    pub fn parse(c: &Value) -> Result<Option<UnifiedVision>> {
        let Some(v) = c.get("vision_config").filter(|v| v.is_object()) else { return Ok(None) };
        let image = ImageConfig::parse(c)?.ok_or_else(|| Error::msg("config: vision_config"))?;
        let w: VisionWritten = parse(v)?;
        let model_patch = w.model_patch_size.unwrap_or(w.patch_size * w.pooling_kernel_size);
        if model_patch != image.patch_size * image.pooling {
            return Err(Error::msg("config: vision_config.model_patch_size must be patch_size × pooling_kernel_size"));
        }
        let cfg = UnifiedVision {
            image,
            model_patch,
            embed_dim: w.mm_embed_dim,
            posemb_size: w.mm_posemb_size,
            output_dims: w.output_proj_dims.unwrap_or(w.mm_embed_dim),
            rms_norm_eps: w.rms_norm_eps,
        };
        if cfg.embed_dim <= 0 || cfg.posemb_size <= 0 || cfg.output_dims <= 0 {
            return Err(Error::msg(
                "config: vision_config: mm_embed_dim, mm_posemb_size, output_proj_dims must be positive",
            ));
        }
        Ok(Some(cfg))
    }

    /// How prompts carry images (as Gemma 4's).
    pub fn placeholders(&self) -> Placeholders {
        self.image.placeholders()
    }

    fn patch_dim(&self) -> i32 {
        (self.model_patch * self.model_patch * 3) as i32
    }

    /// One image → its patches `[1, S, 48·48·3]` (rows ordered by row then
    /// column, each patch's values by row, column, channel; padded with
    /// zeros to the budget S), their (column, row) positions `[1, S, 2]`
    /// (-1 for padding) in `extra`, and the count of real patches.
    pub fn process(&self, img: &RawImage) -> Result<MediaInput> {
        let resized = self.image.process(img)?;
        let (h, w) = (resized.pixels.dim(2), resized.pixels.dim(3));
        let m = self.model_patch as i32;
        let (ph, pw) = (h / m, w / m);
        let n = ph * pw;
        let budget = self.image.max_soft_tokens as i32;
        if n > budget || n == 0 {
            return Err(Error::msg(format!("the resized {w}x{h} image gives {n} patches for a budget of {budget}")));
        }
        let patches = resized.pixels.reshape(&[3, ph, m, pw, m])?.transpose(&[1, 3, 2, 4, 0])?.reshape(&[
            1,
            n,
            self.patch_dim(),
        ])?;
        let zero = patches.scalar_like(0.0)?;
        let patches = patches.pad(&[1], &[0], &[budget - n], &zero, "constant")?;
        let pos: Vec<i32> = (0..budget).flat_map(|k| if k < n { [k % pw, k / pw] } else { [-1, -1] }).collect();
        Ok(MediaInput {
            pixels: patches,
            grid: vec![ph as i64, pw as i64],
            tokens: n as u32,
            extra: vec![Array::from_slice(&pos, &[1, budget, 2])?],
        })
    }
}

/// `audio_config` of a unified checkpoint, with the processor's settings.
#[derive(Debug, Clone)]
pub struct UnifiedAudio {
    /// The soft token each audio row replaces.
    pub audio_token_id: u32,
    /// Begin-of-audio token.
    pub boa_token_id: u32,
    /// End-of-audio token.
    pub eoa_token_id: u32,
    /// Samples per row (640: 40 ms at 16 kHz).
    pub samples_per_token: i32,
    /// Width of a row before the projection.
    pub output_dims: i32,
    /// Epsilon of the projector's norm.
    pub rms_norm_eps: f32,
    /// Most placeholders per clip.
    pub max_tokens: u32,
    /// Milliseconds of audio per placeholder.
    pub ms_per_token: u32,
}

impl UnifiedAudio {
    /// From config.json (`None` without `audio_config`).
    pub fn parse(c: &Value) -> Result<Option<UnifiedAudio>> {
        let Some(a) = c.get("audio_config").filter(|v| v.is_object()) else { return Ok(None) };
        let w: AudioWritten = parse(a)?;
        let cfg = UnifiedAudio {
            audio_token_id: plugin_api::config::field(c, "audio_token_id")?,
            boa_token_id: plugin_api::config::field(c, "boa_token_id")?,
            eoa_token_id: famlx_gemma4::audio::eoa_token_id(c)?,
            samples_per_token: w.audio_samples_per_token,
            output_dims: w.output_proj_dims.unwrap_or(w.audio_samples_per_token),
            rms_norm_eps: w.rms_norm_eps,
            max_tokens: processor_setting(c, "audio_seq_length", 750)?,
            ms_per_token: famlx_gemma4::audio::ms_per_token(c)?,
        };
        if cfg.samples_per_token <= 0 || cfg.output_dims != cfg.samples_per_token {
            return Err(Error::msg(
                "config: audio_config: audio_samples_per_token must be positive and equal output_proj_dims",
            ));
        }
        Ok(Some(cfg))
    }

    /// How prompts carry audio (as Gemma 4's).
    pub fn placeholders(&self) -> Placeholders {
        placeholders(self.audio_token_id, self.boa_token_id, self.eoa_token_id)
    }

    /// One clip → its frames `[1, N, 640]` (zero-padded to whole frames)
    /// and its placeholder count.
    pub fn process(&self, audio: &RawAudio) -> Result<MediaInput> {
        check_clip(audio)?;
        let per = self.samples_per_token as usize;
        let n = audio.samples.len().div_ceil(per);
        let mut frames = audio.samples.to_vec();
        frames.resize(n * per, 0.0);
        Ok(MediaInput {
            pixels: Array::from_slice(&frames, &[1, n as i32, per as i32])?,
            grid: vec![n as i64],
            tokens: tokens_for(audio, self.ms_per_token, self.max_tokens),
            extra: Vec::new(),
        })
    }
}

/// Patch embedding, positions, and the projector into the text model.
#[derive(Debug)]
pub struct VisionEmbedder {
    ln1: LayerNorm,
    dense: Linear,
    ln2: LayerNorm,
    positions: Array,
    pos_norm: LayerNorm,
    projection: Linear,
    eps: f32,
}

impl VisionEmbedder {
    /// Whether the checkpoint holds the embedder.
    pub fn present(w: &dyn Weights) -> bool {
        ["vision_embedder.patch_dense.weight", "embed_vision.embedding_projection.weight"]
            .iter()
            .all(|n| w.get(n).is_some())
    }

    /// Loads `vision_embedder.*` and `embed_vision.*` (to `text_hidden`).
    pub fn load(cfg: &UnifiedVision, w: &dyn Weights, text_hidden: i32) -> Result<VisionEmbedder> {
        let (p, d) = (cfg.patch_dim(), cfg.embed_dim);
        let ln = |n: &str, dim: i32| LayerNorm::load(w, &format!("vision_embedder.{n}"), dim, LAYER_NORM_EPS, true);
        Ok(VisionEmbedder {
            ln1: ln("patch_ln1", p)?,
            dense: Linear::load_with_bias(w, "vision_embedder.patch_dense", p, d, true)?,
            ln2: ln("patch_ln2", d)?,
            positions: w.tensor("vision_embedder.pos_embedding", &[cfg.posemb_size, 2, d], Kind::Float)?,
            pos_norm: ln("pos_norm", d)?,
            projection: Linear::load(w, "embed_vision.embedding_projection", cfg.output_dims, text_hidden)?,
            eps: cfg.rms_norm_eps,
        })
    }
}

impl Tower for VisionEmbedder {
    fn embed(&self, item: &MediaInput) -> Result<Array> {
        let pos = item.extra.first().ok_or_else(|| Error::msg("image patches without their positions"))?;
        let h = self.ln2.forward(&self.dense.forward(&self.ln1.forward(&item.pixels)?)?)?;
        let clamped = pos.maximum(&Array::i32(0))?;
        let valid = pos.ne(&Array::i32(-1))?.astype(h.dtype())?;
        // Row k of the table holds column k's embedding in [.., 0, ..] and row k's in [.., 1, ..].
        let along = |axis: i32| -> Result<Array> {
            let idx = clamped.slice_axis(-1, axis, axis + 1)?.squeeze(&[-1])?;
            let e = self.positions.take(&idx, 0)?.slice_axis(-2, axis, axis + 1)?.squeeze(&[-2])?;
            e.mul(&valid.slice_axis(-1, axis, axis + 1)?)
        };
        let h = self.pos_norm.forward(&h.add(&along(0)?.add(&along(1)?)?)?)?;
        let rows = self.projection.forward(&rms_norm(&h, None, self.eps)?)?.squeeze(&[0])?;
        first_rows(&rows, item.tokens)
    }
}

/// The audio projector: frames straight into the text model.
#[derive(Debug)]
pub struct AudioEmbedder {
    projection: Linear,
    eps: f32,
}

impl AudioEmbedder {
    /// Whether the checkpoint holds the projector.
    pub fn present(w: &dyn Weights) -> bool {
        w.get("embed_audio.embedding_projection.weight").is_some()
    }

    /// Loads `embed_audio.*` (to `text_hidden`).
    pub fn load(cfg: &UnifiedAudio, w: &dyn Weights, text_hidden: i32) -> Result<AudioEmbedder> {
        Ok(AudioEmbedder {
            projection: Linear::load(w, "embed_audio.embedding_projection", cfg.output_dims, text_hidden)?,
            eps: cfg.rms_norm_eps,
        })
    }
}

impl Tower for AudioEmbedder {
    fn embed(&self, item: &MediaInput) -> Result<Array> {
        let rows = self.projection.forward(&rms_norm(&item.pixels, None, self.eps)?)?.squeeze(&[0])?;
        first_rows(&rows, item.tokens)
    }
}
