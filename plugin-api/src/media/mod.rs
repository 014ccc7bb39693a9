//! Images across the plugin boundary: what the host decodes ([`RawImage`]),
//! what a family's media processor makes of it ([`ProcessedImage`], plugin
//! side [`MediaInput`]), how a family's prompts carry images
//! ([`MediaSpec`]), and the resampler processors share ([`resize_bicubic`],
//! Pillow's bicubic to the bit).

mod resize;
mod types;

pub use resize::{resize_bicubic, resize_bicubic_rgb};
pub use types::{MediaInput, MediaSpec, Positions, ProcessedImage, RawImage};
