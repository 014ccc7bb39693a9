//! The gemma3 plugin: Google's Gemma 2 and Gemma 3 text models.
//!
//! - [`gemma2::Gemma2Family`] serves `gemma2` (Gemma 2 2B, 9B, 27B).
//! - [`gemma3_text::Gemma3TextFamily`] serves `gemma3_text` (Gemma 3 1B,
//!   and text-only Gemma 3 checkpoints).
//! - [`gemma3::Gemma3Family`] serves `gemma3` (Gemma 3 4B, 12B, 27B): the
//!   text model of the multimodal checkpoints (the vision tower comes later).
//!
//! They share one decoder ([`model::GemmaLm`]): the SDK's blocks with
//! sandwich norms, run by a forward of its own for Gemma 2's soft-capped
//! attention ([`softcap`]) and Gemma 3's float16 residual clipping.

pub mod gemma2;
mod gemma2_gguf;
pub mod gemma3;
pub mod gemma3_text;
mod gguf;
pub mod model;
pub mod softcap;

#[cfg(feature = "export")]
plugin_api::export_plugin!(
    "famlx-plugin-gemma3",
    [gemma2::Gemma2Family, gemma3_text::Gemma3TextFamily, gemma3::Gemma3Family]
);
