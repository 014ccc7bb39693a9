//! Gemma 4's image inputs: the media settings of a multimodal checkpoint
//! (token ids, the image processor's settings, bidirectional attention over
//! image tokens) and the image processor: the aspect ratio kept, sides
//! multiples of 48 filling a budget of `max_soft_tokens` pooled tokens,
//! Pillow's bicubic resize, rescale by 1/255.

use crate::vision::VisionConfig;
use mlx::{Array, Error, Result};
use plugin_api::config::{field, nullable, parse};
use plugin_api::media::MediaInput;
use plugin_api::{Placeholders, RawImage};
use serde::Deserialize;
use serde_json::Value;

/// The soft-token budgets Gemma 4 was trained with.
pub const BUDGETS: [u32; 5] = [70, 140, 280, 560, 1120];

plugin_api::config_defaults! {
    yes / yes_or_null: bool = true;
    budget / budget_or_null: u32 = 280;
    zeros / zeros_or_null: [f32; 3] = [0.0; 3];
    ones / ones_or_null: [f32; 3] = [1.0; 3];
    byte / byte_or_null: f32 = 1.0 / 255.0;
}

/// The image processor's settings as written; absent (or null) fields take
/// the processor's defaults.
#[derive(Debug, Clone, Deserialize)]
struct Processor {
    #[serde(default, deserialize_with = "nullable")]
    do_normalize: bool,
    /// `vision_config`'s when absent.
    patch_size: Option<u32>,
    #[serde(default = "budget", deserialize_with = "budget_or_null")]
    max_soft_tokens: u32,
    /// `vision_config`'s when absent.
    pooling_kernel_size: Option<u32>,
    #[serde(default = "yes", deserialize_with = "yes_or_null")]
    do_rescale: bool,
}

/// The processor's normalization, read only when it normalizes.
#[derive(Debug, Clone, Deserialize)]
struct Normalize {
    #[serde(default = "zeros", deserialize_with = "zeros_or_null")]
    image_mean: [f32; 3],
    #[serde(default = "ones", deserialize_with = "ones_or_null")]
    image_std: [f32; 3],
}

/// The processor's rescale, read only when it rescales.
#[derive(Debug, Clone, Deserialize)]
struct Rescale {
    #[serde(default = "byte", deserialize_with = "byte_or_null")]
    rescale_factor: f32,
}

/// Image settings of a multimodal checkpoint.
#[derive(Debug, Clone)]
pub struct ImageConfig {
    /// The soft token each image row replaces.
    pub image_token_id: u32,
    /// Begin-of-image token.
    pub boi_token_id: u32,
    /// End-of-image token.
    pub eoi_token_id: u32,
    /// Image tokens attend to their whole image (`use_bidirectional_attention: "vision"`).
    pub bidirectional: bool,
    /// Pixels per patch side.
    pub patch_size: u32,
    /// Most pooled tokens per image.
    pub max_soft_tokens: u32,
    /// Patches per pooled token side.
    pub pooling: u32,
    /// Multiplier from 8-bit values to the tower's input.
    pub rescale: f32,
    /// Per-channel mean and std, when the processor normalizes.
    pub normalize: Option<([f32; 3], [f32; 3])>,
    /// The tower's config.
    pub vision: VisionConfig,
}

impl ImageConfig {
    /// From config.json with the processor's settings the host put beside
    /// it (`processor_config` / `preprocessor_config`); `None` for a
    /// checkpoint without `vision_config`.
    pub fn parse(c: &Value) -> Result<Option<ImageConfig>> {
        let Some(vision) = VisionConfig::parse(c)? else { return Ok(None) };
        let proc = c
            .get("processor_config")
            .and_then(|p| p.get("image_processor").or(Some(p)))
            .or_else(|| c.get("preprocessor_config"))
            .cloned()
            .unwrap_or(Value::Null);
        let p = if proc.is_object() { proc } else { Value::Object(Default::default()) };
        let t = plugin_api::config::text_config(c);
        let id = |n: &str| field::<u32>(c, n);
        let image_token_id = id("image_token_id")?;
        // The other media ids must be ids too (the model reads them).
        crate::media::media_ids(c)?;
        let settings: Processor = parse(&p)?;
        let normalize = if settings.do_normalize {
            let Normalize { image_mean: mean, image_std: std } = parse(&p)?;
            if std.iter().any(|s| *s == 0.0 || !s.is_finite()) {
                return Err(Error::msg("processor config: image_std must be finite and non-zero"));
            }
            Some((mean, std))
        } else {
            None
        };
        let cfg = ImageConfig {
            image_token_id,
            boi_token_id: id("boi_token_id")?,
            eoi_token_id: id("eoi_token_id")?,
            bidirectional: t.get("use_bidirectional_attention").and_then(Value::as_str) == Some("vision"),
            patch_size: settings.patch_size.unwrap_or(vision.patch_size as u32),
            max_soft_tokens: settings.max_soft_tokens,
            pooling: settings.pooling_kernel_size.unwrap_or(vision.pooling_kernel_size as u32),
            rescale: if settings.do_rescale { parse::<Rescale>(&p)?.rescale_factor } else { 1.0 },
            normalize,
            vision,
        };
        if cfg.patch_size as i32 != cfg.vision.patch_size || cfg.pooling as i32 != cfg.vision.pooling_kernel_size {
            return Err(Error::msg("processor config: patch_size / pooling_kernel_size differ from vision_config's"));
        }
        let mut cfg = cfg;
        if let Some(n) = c.get("famlx_image_tokens").and_then(Value::as_u64) {
            if !BUDGETS.contains(&(n as u32)) {
                return Err(Error::msg(format!("gemma4 takes {BUDGETS:?} soft tokens per image, not {n}")));
            }
            cfg.max_soft_tokens = n as u32;
        }
        if !(1..=4096).contains(&cfg.max_soft_tokens) {
            return Err(Error::msg(format!(
                "processor config: max_soft_tokens must be in 1..=4096 (Gemma 4 uses {BUDGETS:?}), got {}",
                cfg.max_soft_tokens
            )));
        }
        Ok(Some(cfg))
    }

    /// How prompts carry images: each `<|image|>` the template writes
    /// becomes `<|image>`, the soft token N times, `<image|>`.
    pub fn placeholders(&self) -> Placeholders {
        Placeholders {
            marker: self.image_token_id,
            prefix: vec![self.boi_token_id].into(),
            token_id: self.image_token_id,
            suffix: vec![self.eoi_token_id].into(),
        }
    }

    /// The resized height and width of an `h x w` image: the aspect ratio
    /// kept, both sides multiples of patch·pooling, as many patches as the
    /// budget allows.
    pub fn target_size(&self, h: u32, w: u32) -> Result<(u32, u32)> {
        let k2 = (self.pooling * self.pooling) as f64;
        let max_patches = self.max_soft_tokens as f64 * k2;
        let target_px = max_patches * (self.patch_size * self.patch_size) as f64;
        let factor = (target_px / (h as f64 * w as f64)).sqrt();
        let m = self.pooling * self.patch_size;
        let side = |s: u32| (factor * s as f64 / m as f64).floor() as u32 * m;
        let (mut th, mut tw) = (side(h), side(w));
        let max_side = self.max_soft_tokens * m;
        if th == 0 && tw == 0 {
            return Err(Error::msg(format!("a {w}x{h} image cannot be resized for the vision tower")));
        }
        if th == 0 {
            th = m;
            tw = ((w / h) * m).min(max_side);
        } else if tw == 0 {
            tw = m;
            th = ((h / w) * m).min(max_side);
        }
        Ok((th, tw))
    }

    /// The tower's input for one image: `[1, 3, H, W]` float32, its patch
    /// grid, and its soft-token count.
    pub fn process(&self, img: &RawImage) -> Result<MediaInput> {
        if img.width == 0 || img.height == 0 {
            return Err(Error::msg(format!("a {}x{} image", img.width, img.height)));
        }
        let (th, tw) = self.target_size(img.height, img.width)?;
        let rgb = img.rgb_resized(tw, th)?;
        let plane = (th * tw) as usize;
        let mut data = vec![0f32; 3 * plane];
        for (i, px) in rgb.chunks_exact(3).enumerate() {
            for c in 0..3 {
                // Multiplied in f32 by f32(1/255), as numpy does it.
                let mut v = px[c] as f32 * self.rescale;
                if let Some((mean, std)) = &self.normalize {
                    v = (v - mean[c]) / std[c];
                }
                data[c * plane + i] = v;
            }
        }
        let p = self.patch_size;
        let grid = [(th / p) as i64, (tw / p) as i64];
        let tokens = (th / p) * (tw / p) / (self.pooling * self.pooling);
        Ok(MediaInput {
            pixels: Array::from_slice(&data, &[1, 3, th as i32, tw as i32])?,
            grid: grid.to_vec(),
            tokens,
            extra: Vec::new(),
        })
    }
}
