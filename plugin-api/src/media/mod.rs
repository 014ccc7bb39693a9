//! Images and audio across the plugin boundary: what the host decodes
//! ([`RawImage`], [`RawAudio`]), what a family's media processor makes of
//! it ([`ProcessedMedia`], plugin side [`MediaInput`]), how a family's
//! prompts carry media ([`MediaSpec`], [`Placeholders`]), and the resampler processors share ([`resize_bicubic`],
//! Pillow's bicubic to the bit).

mod resize;
mod types;

pub use resize::{resize_bicubic, resize_bicubic_rgb};
pub use types::{MediaInput, MediaSpec, Placeholders, Positions, ProcessedMedia, RawAudio, RawImage};

/// The former name of [`ProcessedMedia`] (ABI 5), kept for source compatibility.
pub type ProcessedImage = ProcessedMedia;
