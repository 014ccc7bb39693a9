//! The media types of the ABI and their plugin-side forms.

use crate::ArrayHandle;
use abi_stable::std_types::{ROption, RVec};
use abi_stable::StableAbi;
use mlx::Array;

/// An image as the host decodes it: RGB, 8 bits per channel, row-major from
/// the top-left corner, EXIF orientation applied (as Pillow's
/// `convert("RGB")` gives it), and the alpha channel apart when the file
/// has one, for processors that composite over white instead of dropping
/// it ([`RawImage::rgb_over_white`]).
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq)]
pub struct RawImage {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// `width * height * 3` bytes.
    pub rgb: RVec<u8>,
    /// `width * height` alpha bytes, or empty for an opaque image.
    pub alpha: RVec<u8>,
}

impl RawImage {
    /// The RGB bytes (alpha dropped, as Pillow's `convert("RGB")` drops it)
    /// resized to `width x height` with Pillow's bicubic filter (unchanged
    /// when the size is the same); an error for an empty or inconsistent
    /// image.
    pub fn rgb_resized(&self, width: u32, height: u32) -> mlx::Result<Vec<u8>> {
        let (w, h) = (self.width, self.height);
        if w == 0 || h == 0 || self.rgb.len() != w as usize * h as usize * 3 {
            return Err(mlx::Error::msg(format!("a {w}x{h} image with {} bytes of RGB", self.rgb.len())));
        }
        if (width, height) == (w, h) {
            return Ok(self.rgb.to_vec());
        }
        Ok(super::resize_bicubic_rgb(&self.rgb, w as usize, h as usize, width as usize, height as usize))
    }

    /// The image composited over opaque white, as Hugging Face's
    /// `convert_to_rgb` does it (Pillow's `alpha_composite` on a white
    /// background, then RGB), bit for bit; the RGB bytes when opaque.
    pub fn rgb_over_white(&self) -> Vec<u8> {
        if self.alpha.is_empty() {
            return self.rgb.to_vec();
        }
        // Pillow's AlphaComposite.c with an opaque white destination: 7-bit
        // fixed-point blend, then division by 255 done as shifts.
        const PRECISION_BITS: u32 = 7;
        let div255 = |a: u32| ((a >> 8) + a) >> 8;
        let mut out = Vec::with_capacity(self.rgb.len());
        for (px, &a) in self.rgb.chunks_exact(3).zip(self.alpha.iter()) {
            let a = a as u32;
            let outa255 = a * 255 + 255 * (255 - a);
            let coef1 = a * 255 * 255 * (1 << PRECISION_BITS) / outa255;
            let coef2 = 255 * (1 << PRECISION_BITS) - coef1;
            for &c in px {
                let tmp = c as u32 * coef1 + 255 * coef2;
                out.push((div255(tmp + (0x80 << PRECISION_BITS)) >> PRECISION_BITS) as u8);
            }
        }
        out
    }
}

/// An audio clip as the host decodes it: one channel (a file's channels
/// averaged, as the reference loaders mix them down), resampled to
/// [`RawAudio::SAMPLE_RATE`], samples in [-1, 1].
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq)]
pub struct RawAudio {
    /// The samples, mono.
    pub samples: RVec<f32>,
    /// Their rate in Hz (the host always hands [`RawAudio::SAMPLE_RATE`]).
    pub sample_rate: u32,
}

impl RawAudio {
    /// The rate every audio family here takes (Gemma 4's feature
    /// extractors: 16 kHz).
    pub const SAMPLE_RATE: u32 = 16_000;

    /// The clip's length in milliseconds.
    pub fn millis(&self) -> f64 {
        self.samples.len() as f64 * 1000.0 / self.sample_rate.max(1) as f64
    }
}

/// An image or an audio clip made into model inputs by its family's media
/// processor ([`crate::abi::Family::process_image`], `process_audio`).
#[repr(C)]
#[derive(StableAbi, Debug, Clone)]
pub struct ProcessedMedia {
    /// The tower's input (pixel values, patches or audio features, family
    /// layout).
    pub pixels: ArrayHandle,
    /// Family-defined sizes (e.g. Qwen's grid `t, h, w` in patches).
    pub grid: RVec<i64>,
    /// Placeholder tokens the item takes in the prompt.
    pub tokens: u32,
    /// Further inputs of the tower (e.g. patch positions).
    pub extra: RVec<ArrayHandle>,
}

/// [`ProcessedMedia`] on the plugin side.
#[derive(Debug, Clone)]
pub struct MediaInput {
    /// The tower's input.
    pub pixels: Array,
    /// Family-defined sizes.
    pub grid: Vec<i64>,
    /// Placeholder tokens the item takes in the prompt.
    pub tokens: u32,
    /// Further inputs of the tower.
    pub extra: Vec<Array>,
}

impl From<MediaInput> for ProcessedMedia {
    fn from(m: MediaInput) -> Self {
        ProcessedMedia {
            pixels: m.pixels.into(),
            grid: m.grid.into(),
            tokens: m.tokens,
            extra: m.extra.into_iter().map(ArrayHandle::from).collect(),
        }
    }
}

impl From<&ProcessedMedia> for MediaInput {
    fn from(p: &ProcessedMedia) -> Self {
        MediaInput {
            pixels: p.pixels.to_array(),
            grid: p.grid.to_vec(),
            tokens: p.tokens,
            extra: p.extra.iter().map(ArrayHandle::to_array).collect(),
        }
    }
}

/// How a family's prompts carry one kind of media, in token ids. The chat
/// template writes the token `marker` once per item; the host replaces the
/// i-th marker of the tokenized prompt with `prefix + token_id × N +
/// suffix` (N: the item's [`ProcessedMedia::tokens`]), as the reference
/// processors expand the text (every token involved is special, so
/// expanding ids equals expanding text).
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq)]
pub struct Placeholders {
    /// The token the chat template writes for one item.
    pub marker: u32,
    /// Tokens before the placeholders.
    pub prefix: RVec<u32>,
    /// The placeholder token's id (the forward puts the item's rows there).
    pub token_id: u32,
    /// Tokens after the placeholders.
    pub suffix: RVec<u32>,
}

impl Placeholders {
    /// Every token id involved (marker, placeholder, prefix and suffix).
    pub fn ids(&self) -> Vec<u32> {
        [self.marker, self.token_id]
            .into_iter()
            .chain(self.prefix.iter().copied())
            .chain(self.suffix.iter().copied())
            .collect()
    }
}

/// How a family's prompts carry media: images, audio clips, or both.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq)]
pub struct MediaSpec {
    /// Images (`None`: the model takes none).
    pub image: ROption<Placeholders>,
    /// Audio clips (`None`: the model takes none).
    pub audio: ROption<Placeholders>,
    /// Prefill must not cut an image's placeholder run in two (its tokens
    /// attend to each other both ways, as Gemma 4's with
    /// `use_bidirectional_attention: "vision"`).
    pub keep_images_whole: bool,
}

impl MediaSpec {
    /// How images are carried, when the model takes them.
    pub fn image_spec(&self) -> Option<&Placeholders> {
        self.image.as_ref().into_option()
    }

    /// How audio clips are carried, when the model takes them.
    pub fn audio_spec(&self) -> Option<&Placeholders> {
        self.audio.as_ref().into_option()
    }

    /// The placeholder token ids of every kind the model takes.
    pub fn placeholder_ids(&self) -> Vec<u32> {
        self.image_spec().into_iter().chain(self.audio_spec()).map(|p| p.token_id).collect()
    }
}

/// Rotary positions a prompt with images needs (Qwen's M-RoPE): family
/// layout, one column per token of the whole sequence, and the offset every
/// later position gets (`position = cache offset + delta`).
#[repr(C)]
#[derive(StableAbi, Debug)]
pub struct Positions {
    /// Position ids, e.g. `[3, 1, L]` int32.
    pub ids: ArrayHandle,
    /// What later positions add to the cache offset.
    pub delta: i64,
}
