//! The cohere plugin: Cohere's Command models, whose blocks run attention
//! and the MLP side by side over one LayerNorm and whose logits are scaled.
//! [`cohere`]: Command R / R+ (`cohere`); [`cohere2`]: Command R7B and
//! Command A (`cohere2`), with sliding-window layers. Both also read GGUF
//! files of llama.cpp's `command-r` and `cohere2` architectures (`gguf.rs`).

pub mod cohere;
pub mod cohere2;
mod gguf;

pub use cohere::CohereFamily;
pub use cohere2::Cohere2Family;

#[cfg(feature = "export")]
plugin_api::export_plugin!("famlx-plugin-cohere", [CohereFamily, Cohere2Family]);
