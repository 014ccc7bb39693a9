//! The llama plugin: exports the family of [`famlx_llama`] (Llama 2 / 3,
//! Mistral, SmolLM2, Phi-3 and friends). The code lives in that library so
//! that a test binary can link it beside another plugin crate (two
//! plugins' exported symbols cannot meet in one binary).

pub use famlx_llama::*;

#[cfg(feature = "export")]
plugin_api::export_plugin!("famlx-plugin-llama", [famlx_llama::LlamaFamily]);
