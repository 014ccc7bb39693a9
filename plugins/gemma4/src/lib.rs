//! The gemma4 plugin: exports the family of [`famlx_gemma4`] (Gemma 4 text
//! models, their vision and audio towers, the `gemma4_assistant` drafter).
//! The code lives in that library so that other plugins (gemma4_unified)
//! can build on it.

pub use famlx_gemma4::*;

#[cfg(feature = "export")]
plugin_api::export_plugin!("famlx-plugin-gemma4", [famlx_gemma4::Gemma4Family]);
