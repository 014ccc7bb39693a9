//! The Qwen3.5 model: embedding (image rows spliced in at their
//! placeholders), the hybrid decoder layers (one cache slot each; M-RoPE
//! over sequences with images), the final norm and the output head; the
//! vision tower of VL checkpoints.

use crate::config::Config;
use crate::gdn::ScanPath;
use crate::image::ImageConfig;
use crate::layer::{Layer, Mixer};
use crate::names::{LM_HEAD, PREFIX};
use crate::vision::VisionTower;
use mlx::nn::{Embedding, OutputHead, RmsNorm, Weights};
use mlx::{Array, Error, Result};
use plugin_api::layers::{lm_output, splice_rows, Rotary, Stage};
use plugin_api::media::MediaInput;
use plugin_api::{Caches, Input, Model, Output};

/// The Qwen3.5 text model.
#[derive(Debug, Clone)]
pub struct Qwen3_5 {
    embed: Embedding,
    /// decoder layers, one cache slot each (of a pipeline split: this
    /// rank's, model layers `stage.layers`)
    pub layers: Vec<Layer>,
    /// This rank's stage of a pipeline split.
    stage: Option<Stage>,
    norm: RmsNorm,
    head: OutputHead,
    image: Option<ImageConfig>,
    vision: Option<VisionTower>,
    /// Rope base and rotated features of the attention layers (for M-RoPE).
    rope: (f32, i32),
    /// The first attention layer's cache slot (its offset is the position).
    first_attention: Option<usize>,
}

impl Qwen3_5 {
    /// Builds the model from weights under mlx-lm's names.
    pub fn load(cfg: &Config, w: &dyn Weights) -> Result<Self> {
        let rope = cfg.rope()?;
        let stage = Stage::of(w, cfg.num_hidden_layers)?;
        let held = |i: usize| Stage::holds(stage.as_ref(), i);
        let layers = (0..cfg.num_hidden_layers)
            .filter(|&i| held(i as usize))
            .map(|i| {
                let p = format!("{PREFIX}layers.{i}");
                Layer::load(w, &p, cfg, cfg.linear[i as usize], cfg.is_sparse(i), &rope)
            })
            .collect::<Result<Vec<_>>>()?;
        let (h, v) = (cfg.hidden_size, cfg.vocab_size);
        let embed = Embedding::load(w, &format!("{PREFIX}embed_tokens"), v, h)?;
        Ok(Qwen3_5 {
            head: OutputHead::load(w, LM_HEAD, &embed, cfg.tie_word_embeddings, h, v)?,
            embed,
            layers,
            norm: RmsNorm::load(w, &format!("{PREFIX}norm"), h, cfg.rms_norm_eps)?,
            image: None,
            vision: None,
            rope: (cfg.rope_theta, cfg.rope_dims),
            // The first attention layer this rank holds (else its first
            // layer): its offset is the position.
            first_attention: (0..cfg.linear.len())
                .find(|&i| held(i) && !cfg.linear[i])
                .or_else(|| (0..cfg.linear.len()).find(|&i| held(i))),
            stage,
        })
    }

    /// With image input as `image` says, the tower loaded from `w` when the
    /// checkpoint has its weights (without them the model serves text and
    /// says so when given an image).
    pub fn with_vision(mut self, image: Option<ImageConfig>, w: &dyn Weights) -> Result<Self> {
        if let Some(img) = &image {
            if VisionTower::present(&img.vision, w) {
                self.vision = Some(VisionTower::load(&img.vision, w)?);
            }
        }
        self.image = image;
        Ok(self)
    }

    /// The M-RoPE tables of this call, when the sequence has images (its
    /// positions are given, or later positions are shifted by the delta);
    /// `None` for text, which keeps the layers' own rope.
    fn rotary(&self, input: &Input, caches: &Caches<'_>, dtype: mlx::Dtype) -> Result<Option<Rotary>> {
        let (Some(img), Some(slot)) = (&self.image, self.first_attention) else { return Ok(None) };
        let (theta, dims) = self.rope;
        match &input.positions {
            Some(p) => Ok(Some(Rotary::mrope(p, theta, dims, img.mrope_section, dtype)?)),
            None if input.position_delta != 0 => {
                let start = caches.offset(slot)? + input.position_delta;
                let l = input.tokens.dim(1);
                Ok(Some(Rotary::mrope_run(start, l, theta, dims, img.mrope_section, dtype)?))
            }
            None => Ok(None),
        }
    }

    /// Sets the scan implementation of every linear-attention layer.
    pub fn set_scan_path(&mut self, path: ScanPath) {
        for l in &mut self.layers {
            if let Mixer::DeltaNet(g) = &mut l.mixer {
                g.path = path;
            }
        }
    }
}

impl Model for Qwen3_5 {
    fn forward(&mut self, input: &Input, caches: &mut Caches<'_>) -> Result<Output> {
        let stage = self.stage.as_ref();
        let shape = [input.tokens.dim(0), input.tokens.dim(1), self.embed.width()];
        let mut h = Stage::enter(stage, &shape, self.embed.dtype(), || {
            let h = input.embed(&self.embed)?;
            match (&input.media, &self.image) {
                (Some(rows), Some(img)) => splice_rows(&h, &input.tokens, rows, &[img.image_token_id]),
                _ => Ok(h),
            }
        })?;
        let rotary = self.rotary(input, caches, h.dtype())?;
        let first = stage.map_or(0, |s| s.layers.start);
        for (i, l) in self.layers.iter().enumerate() {
            h = l.forward(&h, caches, first + i, rotary.as_ref())?;
        }
        let h = Stage::leave(stage, h, input)?;
        // The hidden state returned with `want_hidden` is taken after the
        // final norm: what the MTP head (mtp.rs) is defined on.
        let h = self.norm.forward(&h)?;
        lm_output(h, input.logits, input.want_hidden, |x| self.head.forward(x))
    }

    fn embed_images(&mut self, images: &[MediaInput]) -> Result<Vec<Array>> {
        let tower = self.vision.as_ref().ok_or_else(|| {
            Error::msg("this checkpoint has no vision tower weights (vision_tower.*): it serves text only")
        })?;
        images.iter().map(|m| tower.embed(m)).collect()
    }

    fn positions(&self, tokens: &[u32], images: &[MediaInput]) -> Result<Option<(Array, i64)>> {
        match &self.image {
            Some(img) if !images.is_empty() => img.positions(tokens, images).map(Some),
            _ => Ok(None),
        }
    }
}
