//! The media types of the ABI and their plugin-side forms.

use crate::ArrayHandle;
use abi_stable::std_types::RVec;
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
            return Err(mlx::Error(format!("a {w}x{h} image with {} bytes of RGB", self.rgb.len())));
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

/// An image made into model inputs by its family's media processor.
#[repr(C)]
#[derive(StableAbi, Debug, Clone)]
pub struct ProcessedImage {
    /// The vision tower's input (pixel values or patches, family layout).
    pub pixels: ArrayHandle,
    /// Family-defined sizes (e.g. Qwen's grid `t, h, w` in patches).
    pub grid: RVec<i64>,
    /// Placeholder tokens the image takes in the prompt.
    pub tokens: u32,
    /// Further inputs of the tower (e.g. patch positions).
    pub extra: RVec<ArrayHandle>,
}

/// [`ProcessedImage`] on the plugin side.
#[derive(Debug, Clone)]
pub struct MediaInput {
    /// The vision tower's input.
    pub pixels: Array,
    /// Family-defined sizes.
    pub grid: Vec<i64>,
    /// Placeholder tokens the image takes in the prompt.
    pub tokens: u32,
    /// Further inputs of the tower.
    pub extra: Vec<Array>,
}

impl From<MediaInput> for ProcessedImage {
    fn from(m: MediaInput) -> Self {
        ProcessedImage {
            pixels: m.pixels.into(),
            grid: m.grid.into(),
            tokens: m.tokens,
            extra: m.extra.into_iter().map(ArrayHandle::from).collect(),
        }
    }
}

impl From<&ProcessedImage> for MediaInput {
    fn from(p: &ProcessedImage) -> Self {
        MediaInput {
            pixels: p.pixels.to_array(),
            grid: p.grid.to_vec(),
            tokens: p.tokens,
            extra: p.extra.iter().map(ArrayHandle::to_array).collect(),
        }
    }
}

/// How a family's prompts carry images, in token ids. The chat template
/// writes the token `image_marker` once per image; the host replaces the
/// i-th marker of the tokenized prompt with `image_prefix + image_token_id
/// × N + image_suffix` (N: the image's [`ProcessedImage::tokens`]), as the
/// reference processors expand the text (every token involved is special,
/// so expanding ids equals expanding text).
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq)]
pub struct MediaSpec {
    /// The token the chat template writes for one image.
    pub image_marker: u32,
    /// Tokens before the placeholders.
    pub image_prefix: RVec<u32>,
    /// The placeholder token's id (the forward puts image rows there).
    pub image_token_id: u32,
    /// Tokens after the placeholders.
    pub image_suffix: RVec<u32>,
    /// Prefill must not cut an image's placeholder run in two (its tokens
    /// attend to each other both ways, as Gemma 4's with
    /// `use_bidirectional_attention: "vision"`).
    pub keep_images_whole: bool,
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
