//! The Gemma 4 model: scaled embeddings (image and audio rows spliced in at
//! their soft tokens), the decoder layers (KV-shared ones reading earlier
//! layers' K/V), per-layer inputs (E2B/E4B), the final norm and the
//! soft-capped output head; the vision and audio towers when the checkpoint
//! has them.

use crate::config::Config;
use crate::layer::Gemma4Layer;
use crate::media::{MediaTokens, Tower};
use mlx::nn::{Embedding, Linear, OutputHead, RmsNorm, Weights};
use mlx::{Array, Dtype, Error, Result};
use plugin_api::layers::{lm_output, splice_rows, SharedKv, Stage};
use plugin_api::media::MediaInput;
use plugin_api::TokenSource;
use plugin_api::{Caches, Input, Model, Output};

/// Per-layer input embeddings (E2B/E4B).
#[derive(Debug, Clone)]
struct PerLayerInputs {
    embed: Embedding,
    embed_scale: f64,
    projection: Linear,
    projection_scale: f64,
    norm: RmsNorm,
    width: i32,
}

/// The Gemma 4 text model.
#[derive(Debug)]
pub struct Gemma4Text {
    embed: Embedding,
    embed_scale: f64,
    /// Decoder layers (of a pipeline split: this rank's, model layers `stage.layers`).
    layers: Vec<Gemma4Layer>,
    /// Layers in the whole model.
    n_layers: usize,
    /// This rank's stage of a pipeline split.
    stage: Option<Stage>,
    norm: RmsNorm,
    head: OutputHead,
    softcap: Option<f32>,
    per_layer: Option<PerLayerInputs>,
    media: MediaTokens,
    vision: Option<Box<dyn Tower>>,
    audio: Option<Box<dyn Tower>>,
}

impl Gemma4Text {
    /// Builds the model from host-held weights.
    pub fn load(cfg: &Config, w: &dyn Weights) -> Result<Gemma4Text> {
        let root = cfg.prefix();
        let p = format!("{root}model");
        let eps = cfg.rms_norm_eps;
        let sources = cfg.kv_sources()?;
        let m = cfg.first_kv_shared() as usize;
        let n = cfg.num_hidden_layers as usize;
        let pl = cfg.hidden_size_per_layer_input;
        // A KV-shared layer reads its source layer's K/V in the same forward:
        // the shared layers and the first layer they read stay on one rank.
        let together = sources[m..].iter().min().map(|&s| s as i32);
        let stage = Stage::of_keeping(w, n as i32, together)?;
        let layers = (0..n)
            .filter(|&i| Stage::holds(stage.as_ref(), i))
            .map(|i| {
                let has_kv = i < m;
                Gemma4Layer::load(cfg, w, &format!("{p}.layers.{i}"), i, has_kv, sources[i], sources[m..].contains(&i))
            })
            .collect::<Result<Vec<_>>>()?;
        let (h, v) = (cfg.hidden_size, cfg.vocab_size);
        let per_layer = (pl > 0)
            .then(|| -> Result<PerLayerInputs> {
                let all = n as i32 * pl;
                Ok(PerLayerInputs {
                    embed: Embedding::load(
                        w,
                        &format!("{p}.embed_tokens_per_layer"),
                        cfg.vocab_size_per_layer_input,
                        all,
                    )?,
                    embed_scale: (pl as f64).sqrt(),
                    projection: Linear::load(w, &format!("{p}.per_layer_model_projection"), h, all)?,
                    projection_scale: (h as f64).powf(-0.5),
                    norm: RmsNorm::load(w, &format!("{p}.per_layer_projection_norm"), pl, eps)?,
                    width: pl,
                })
            })
            .transpose()?;
        let embed = Embedding::load(w, &format!("{p}.embed_tokens"), v, h)?;
        Ok(Gemma4Text {
            head: OutputHead::load(w, &format!("{root}lm_head"), &embed, cfg.tie_word_embeddings, h, v)?,
            embed,
            embed_scale: (h as f64).sqrt(),
            layers,
            n_layers: n,
            stage,
            norm: RmsNorm::load(w, &format!("{p}.norm"), h, eps)?,
            softcap: cfg.final_logit_softcapping.filter(|c| *c > 0.0),
            per_layer,
            media: MediaTokens::default(),
            vision: None,
            audio: None,
        })
    }

    /// With media input as `media` says, through the towers the checkpoint
    /// has (without one, the model says so when given its kind of input).
    pub fn with_media(
        mut self,
        media: MediaTokens,
        vision: Option<Box<dyn Tower>>,
        audio: Option<Box<dyn Tower>>,
    ) -> Gemma4Text {
        self.media = media;
        self.vision = vision;
        self.audio = audio;
        self
    }

    /// Where each call token may also look besides causally: the tokens of
    /// one image see each other (`[L, L]` bool), for checkpoints with
    /// `use_bidirectional_attention: "vision"`, in calls without audio.
    fn image_overlay(&self, input: &Input) -> Result<Option<Array>> {
        let Some(image_token) = self.media.image_token_id.filter(|_| self.media.bidirectional_images) else {
            return Ok(None);
        };
        let l = input.tokens.dim(1);
        if input.media.is_none() || l < 2 {
            return Ok(None);
        }
        let flat = input.tokens.reshape(&[l])?;
        if let Some(a) = self.media.audio_token_id {
            // mlx-vlm 0.7.10 prefills prompts with audio in chunks, and its
            // chunked masks leave the image overlay out: with audio in the
            // call, image tokens attend causally as there.
            if input.tokens.to_vec::<i32>()?.contains(&(a as i32)) {
                return Ok(None);
            }
        }
        let is_img = flat.eq(&Array::i32(image_token as i32))?;
        let prev = mlx::concatenate(&[&Array::from_slice(&[false], &[1])?, &is_img.slice_axis(0, 0, l - 1)?], 0)?;
        let starts = is_img.logical_and(&prev.logical_not()?)?.astype(Dtype::I32)?;
        // Runs numbered from 1; text tokens 0.
        let block = mlx::where_(&is_img, &starts.cumsum(0, false, true)?, &Array::i32(0))?;
        let (q, k) = (block.expand_dims(&[1])?, block.expand_dims(&[0])?);
        Ok(Some(q.eq(&k)?.logical_and(&q.gt(&Array::i32(0))?)?))
    }

    /// The token ids the per-layer embedding reads. As in mlx-vlm 0.7.10:
    /// a prompt token with an image, video or audio token id reads the pad
    /// token's row, whether or not the request gives media (its
    /// `get_input_embeddings` masks the whole prompt); a generated token
    /// reads its own row (its decode steps call the language model with the
    /// ids alone).
    fn per_layer_ids(&self, input: &Input) -> Result<Array> {
        let mut ids = input.tokens.clone();
        if input.source == TokenSource::Generated {
            return Ok(ids);
        }
        for &m in &self.media.media_ids {
            ids = mlx::where_(&ids.eq(&Array::i32(m as i32))?, &Array::i32(0), &ids)?;
        }
        Ok(ids)
    }

    /// The per-layer inputs `[B, L, layers, width]`, from the token ids and
    /// the scaled input embeddings.
    fn per_layer_inputs(&self, pl: &PerLayerInputs, tokens: &Array, h: &Array) -> Result<Array> {
        let n = self.n_layers as i32;
        let (b, l) = (h.dim(0), h.dim(1));
        let from_ids = pl.embed.forward(tokens)?.mul_s(pl.embed_scale)?.reshape(&[b, l, n, pl.width])?;
        let proj = pl.projection.forward(h)?.mul_s(pl.projection_scale)?.reshape(&[b, l, n, pl.width])?;
        let proj = pl.norm.forward(&proj)?;
        proj.add(&from_ids)?.mul_s(std::f64::consts::FRAC_1_SQRT_2)
    }
}

impl Model for Gemma4Text {
    fn forward(&mut self, input: &Input, caches: &mut Caches<'_>) -> Result<Output> {
        let stage = self.stage.as_ref();
        let first_stage = stage.is_none_or(|s| s.rank == 0);
        // The scaled input embeddings: the first stage's input, and what
        // every stage's per-layer inputs are computed from.
        let embedded = || -> Result<Array> {
            let h = input.embed(&self.embed)?.mul_s(self.embed_scale)?;
            match &input.media {
                // Tower rows go in as the tower gives them, not scaled.
                Some(rows) => splice_rows(&h, &input.tokens, rows, &self.media.placeholders()),
                None => Ok(h),
            }
        };
        let h0 = if first_stage || self.per_layer.is_some() { Some(embedded()?) } else { None };
        let overlay = self.image_overlay(input)?;
        let pli = match (&self.per_layer, &h0) {
            (Some(pl), Some(h0)) => Some(self.per_layer_inputs(pl, &self.per_layer_ids(input)?, h0)?),
            _ => None,
        };
        let shape = [input.tokens.dim(0), input.tokens.dim(1), self.embed.width()];
        let mut h = Stage::enter(stage, &shape, self.embed.dtype(), || {
            h0.clone().ok_or_else(|| Error::msg("gemma4: no input embeddings"))
        })?;
        let first = stage.map_or(0, |s| s.layers.start);
        let mut kept: Vec<Option<SharedKv>> = vec![None; self.n_layers];
        for (j, layer) in self.layers.iter().enumerate() {
            let i = first + j;
            let shared = match layer.slot {
                Some(_) => None,
                None => Some(kept[layer.source].as_ref().ok_or_else(|| {
                    Error::msg(format!("gemma4: layer {i}: source layer {} kept no K/V", layer.source))
                })?),
            };
            let li = pli.as_ref().map(|p| p.slice_axis(2, i as i32, i as i32 + 1)?.squeeze(&[2])).transpose()?;
            let (out, k) = layer.forward(&h, caches, shared, li.as_ref(), overlay.as_ref())?;
            h = out;
            if k.is_some() {
                kept[i] = k;
            }
        }
        let h = self.norm.forward(&Stage::leave(stage, h, input)?)?;
        lm_output(h, input.logits, input.want_hidden, |x| {
            let logits = self.head.forward(x)?;
            match self.softcap {
                Some(c) => logits.div_s(c as f64)?.tanh()?.mul_s(c as f64),
                None => Ok(logits),
            }
        })
    }

    fn embed_images(&mut self, images: &[MediaInput]) -> Result<Vec<Array>> {
        let tower = self
            .vision
            .as_ref()
            .ok_or_else(|| Error::msg("this checkpoint has no vision weights: it takes no images"))?;
        images.iter().map(|m| tower.embed(m)).collect()
    }

    fn embed_audio(&mut self, clips: &[MediaInput]) -> Result<Vec<Array>> {
        let tower =
            self.audio.as_ref().ok_or_else(|| Error::msg("this checkpoint has no audio weights: it takes no audio"))?;
        clips.iter().map(|m| tower.embed(m)).collect()
    }
}
