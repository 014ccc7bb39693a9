//! Qwen3.5's image inputs: the media settings of a VL checkpoint (token
//! ids, the image processor's settings, the M-RoPE sections), the image
//! processor (sides multiples of 32 within the pixel budget, Pillow's
//! bicubic resize, rescale and normalize, two temporal copies, patches in
//! 2x2 merge-window order) and the 3-D rope positions of a prompt.

use crate::vision::VisionConfig;
use mlx::{Array, Error, Result};
use plugin_api::abi_stable::std_types::ROption;
use plugin_api::config::{field, field_or, parse, text_config};
use plugin_api::media::MediaInput;
use plugin_api::{MediaSpec, Placeholders, RawImage};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

plugin_api::config_defaults! {
    yes / yes_or_null: bool = true;
    halves / halves_or_null: [f32; 3] = [0.5; 3];
    byte / byte_or_null: f32 = 1.0 / 255.0;
}

/// An integer when the field holds one; any other value reads as absent.
fn any_integer<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<i64>, D::Error> {
    Ok(Value::deserialize(d)?.as_i64())
}

/// The image processor's settings as written; absent (or null) fields take
/// the processor's defaults, and the pixel budget and patch sizes read as
/// absent when they are not numbers.
#[derive(Debug, Clone, Deserialize)]
struct Processor {
    /// Its `shortest_edge` / `longest_edge` bound the pixels when numbers.
    size: Option<Value>,
    /// Fewest pixels (over `size.shortest_edge`; else 56²).
    #[serde(default, deserialize_with = "crate::config::any_number")]
    min_pixels: Option<f64>,
    /// Most pixels (over `size.longest_edge`; else 14² × 4 × 1280).
    #[serde(default, deserialize_with = "crate::config::any_number")]
    max_pixels: Option<f64>,
    #[serde(default = "yes", deserialize_with = "yes_or_null")]
    do_normalize: bool,
    #[serde(default = "yes", deserialize_with = "yes_or_null")]
    do_rescale: bool,
    /// Must match `vision_config`'s when given.
    #[serde(default, deserialize_with = "any_integer")]
    patch_size: Option<i64>,
    /// Must match `vision_config`'s when given.
    #[serde(default, deserialize_with = "any_integer")]
    temporal_patch_size: Option<i64>,
}

/// The processor's normalization, read only when it normalizes.
#[derive(Debug, Clone, Deserialize)]
struct Normalize {
    #[serde(default = "halves", deserialize_with = "halves_or_null")]
    image_mean: [f32; 3],
    #[serde(default = "halves", deserialize_with = "halves_or_null")]
    image_std: [f32; 3],
}

/// The processor's rescale, read only when it rescales.
#[derive(Debug, Clone, Deserialize)]
struct Rescale {
    #[serde(default = "byte", deserialize_with = "byte_or_null")]
    rescale_factor: f32,
}

/// Image settings of a VL checkpoint.
#[derive(Debug, Clone)]
pub struct ImageConfig {
    /// The placeholder token each image row replaces.
    pub image_token_id: u32,
    /// Fewest pixels of a resized image.
    pub min_pixels: f64,
    /// Most pixels of a resized image.
    pub max_pixels: f64,
    /// Multiplier from 8-bit values.
    pub rescale: f32,
    /// Per-channel mean and std (None: no normalization).
    pub normalize: Option<([f32; 3], [f32; 3])>,
    /// M-RoPE: rotary frequencies per axis (time, height, width).
    pub mrope_section: [i32; 3],
    /// The tower's config.
    pub vision: VisionConfig,
}

impl ImageConfig {
    /// From config.json with the processor's settings the host put beside
    /// it: `preprocessor_config`, overridden by `processor_config`'s
    /// `image_processor`. `None` for a checkpoint without `vision_config`.
    pub fn parse(c: &Value) -> Result<Option<ImageConfig>> {
        let Some(vision) = VisionConfig::parse(c)? else { return Ok(None) };
        let mut p = c
            .get("preprocessor_config")
            .filter(|v| v.is_object())
            .cloned()
            .unwrap_or(Value::Object(Default::default()));
        if let Some(over) = c.get("processor_config").and_then(|v| v.get("image_processor")).and_then(Value::as_object)
        {
            if let Some(o) = p.as_object_mut() {
                o.extend(over.clone());
            }
        }
        let w: Processor = parse(&p)?;
        let edge = |k: &str| w.size.as_ref().and_then(|s| s.get(k)).and_then(Value::as_f64);
        let mut min_pixels = w.min_pixels.or(edge("shortest_edge")).unwrap_or(56.0 * 56.0);
        let mut max_pixels = w.max_pixels.or(edge("longest_edge")).unwrap_or(14.0 * 14.0 * 4.0 * 1280.0);
        if let Some(n) = c.get("famlx_image_tokens").and_then(Value::as_u64) {
            // One placeholder per merged window of (patch x merge)^2 pixels.
            let window = (vision.patch_size * vision.spatial_merge_size) as f64;
            if n == 0 {
                return Err(Error::msg("at least one token per image"));
            }
            max_pixels = n as f64 * window * window;
            min_pixels = min_pixels.min(max_pixels);
        }
        if !(min_pixels > 0.0 && max_pixels >= min_pixels && max_pixels.is_finite()) {
            return Err(Error::msg(format!(
                "processor config: min_pixels {min_pixels} / max_pixels {max_pixels} must be positive and ordered"
            )));
        }
        let normalize = if w.do_normalize {
            let Normalize { image_mean: mean, image_std: std } = parse(&p)?;
            if std.iter().any(|s| *s == 0.0 || !s.is_finite()) {
                return Err(Error::msg("processor config: image_std must be finite and non-zero"));
            }
            Some((mean, std))
        } else {
            None
        };
        let t = text_config(c);
        let rp = t.get("rope_parameters").or_else(|| t.get("rope_scaling")).cloned().unwrap_or(Value::Null);
        let mrope_section: [i32; 3] = field_or(&rp, "mrope_section", [11, 11, 10])?;
        for (k, v, want) in [
            ("patch_size", w.patch_size, vision.patch_size),
            ("temporal_patch_size", w.temporal_patch_size, vision.temporal_patch_size),
        ] {
            if let Some(v) = v {
                if v != want as i64 {
                    return Err(Error::msg(format!("processor config: {k} {v} differs from vision_config's {want}")));
                }
            }
        }
        Ok(Some(ImageConfig {
            image_token_id: field(c, "image_token_id")?,
            min_pixels,
            max_pixels,
            rescale: if w.do_rescale { parse::<Rescale>(&p)?.rescale_factor } else { 1.0 },
            normalize,
            mrope_section,
            vision,
        }))
    }

    /// How prompts carry images: the template writes
    /// `<|vision_start|><|image_pad|><|vision_end|>`; the pad becomes N pads.
    pub fn spec(&self) -> MediaSpec {
        MediaSpec {
            image: ROption::RSome(Placeholders {
                marker: self.image_token_id,
                prefix: Vec::new().into(),
                token_id: self.image_token_id,
                suffix: Vec::new().into(),
            }),
            audio: ROption::RNone,
            keep_images_whole: false,
        }
    }

    /// Pixels per grid step of the resized sides (patch × merge).
    fn factor(&self) -> f64 {
        (self.vision.patch_size * self.vision.spatial_merge_size) as f64
    }

    /// The resized height and width of an `h x w` image: multiples of 32
    /// nearest the original (ties to even, as Python's `round`), scaled into
    /// the pixel budget.
    pub fn target_size(&self, h: u32, w: u32) -> Result<(u32, u32)> {
        let (hf, wf) = (h as f64, w as f64);
        if hf.max(wf) / hf.min(wf) > 200.0 {
            return Err(Error::msg(format!("a {w}x{h} image: the aspect ratio must be at most 200")));
        }
        let f = self.factor();
        let (mut th, mut tw) = ((hf / f).round_ties_even() * f, (wf / f).round_ties_even() * f);
        if th * tw > self.max_pixels {
            let beta = (hf * wf / self.max_pixels).sqrt();
            th = f.max((hf / beta / f).floor() * f);
            tw = f.max((wf / beta / f).floor() * f);
        } else if th * tw < self.min_pixels {
            let beta = (self.min_pixels / (hf * wf)).sqrt();
            th = (hf * beta / f).ceil() * f;
            tw = (wf * beta / f).ceil() * f;
        }
        Ok((th as u32, tw as u32))
    }

    /// The tower's input for one image: patches `[N, C·T·P·P]` float32 in
    /// 2x2 merge-window order, the grid `[t, h, w]` in patches, and its
    /// placeholder count (one per 2x2 window).
    pub fn process(&self, img: &RawImage) -> Result<MediaInput> {
        if img.width == 0 || img.height == 0 {
            return Err(Error::msg(format!("a {}x{} image", img.width, img.height)));
        }
        let (th, tw) = self.target_size(img.height, img.width)?;
        let rgb = img.rgb_resized(tw, th)?;
        let value = |px: u8, c: usize| -> f32 {
            let v = px as f32 * self.rescale;
            match &self.normalize {
                Some((mean, std)) => (v - mean[c]) / std[c],
                None => v,
            }
        };
        let p = self.vision.patch_size as usize;
        let t = self.vision.temporal_patch_size as usize;
        let m = self.vision.spatial_merge_size as usize;
        let (gh, gw) = (th as usize / p, tw as usize / p);
        let row = 3 * t * p * p;
        let mut data = vec![0f32; gh * gw * row];
        let mut n = 0;
        for bh in 0..gh / m {
            for bw in 0..gw / m {
                for r in 0..m {
                    for c in 0..m {
                        let (y0, x0) = (bh * m + r, bw * m + c);
                        let out = &mut data[n * row..(n + 1) * row];
                        for ch in 0..3 {
                            for tt in 0..t {
                                for py in 0..p {
                                    for px in 0..p {
                                        let src = ((y0 * p + py) * tw as usize + x0 * p + px) * 3 + ch;
                                        out[((ch * t + tt) * p + py) * p + px] = value(rgb[src], ch);
                                    }
                                }
                            }
                        }
                        n += 1;
                    }
                }
            }
        }
        Ok(MediaInput {
            pixels: Array::from_slice(&data, &[(gh * gw) as i32, row as i32])?,
            grid: vec![1, gh as i64, gw as i64],
            tokens: (gh * gw / (m * m)) as u32,
            extra: Vec::new(),
        })
    }

    /// The M-RoPE positions `[3, L]` of a prompt with images (each image's
    /// tokens at (start, start + row, start + column) of its merged grid,
    /// text after an image continuing from its largest position + 1) and
    /// the delta later positions add to the token index.
    pub fn positions(&self, tokens: &[u32], images: &[MediaInput]) -> Result<(Array, i64)> {
        let l = tokens.len();
        let mut pos = vec![0i32; 3 * l];
        let m = self.vision.spatial_merge_size as i64;
        let (mut next, mut i, mut img) = (0i64, 0usize, 0usize);
        while i < l {
            if tokens[i] == self.image_token_id {
                let g = images.get(img).ok_or_else(|| Error::msg("more image placeholder runs than images"))?;
                img += 1;
                let (t, h, w) = (g.grid[0], g.grid[1] / m, g.grid[2] / m);
                let n = (t * h * w) as usize;
                if i + n > l {
                    return Err(Error::msg("an image's placeholders run past the prompt"));
                }
                for k in 0..n as i64 {
                    let at = i + k as usize;
                    let (tt, y, x) = (k / (h * w), (k / w) % h, k % w);
                    pos[at] = (next + tt) as i32;
                    pos[l + at] = (next + y) as i32;
                    pos[2 * l + at] = (next + x) as i32;
                }
                i += n;
                next += t.max(h).max(w);
            } else {
                for a in 0..3 {
                    pos[a * l + i] = next as i32;
                }
                next += 1;
                i += 1;
            }
        }
        Ok((Array::from_slice(&pos, &[3, l as i32])?, next - l as i64))
    }
}
