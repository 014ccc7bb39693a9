//! The Phi families other than Phi-3 (which the llama family serves): `phi`
//! (Phi-1, Phi-1.5, Phi-2: parallel GPT-style blocks with LayerNorms and
//! biases) and `phimoe` (Phi-3.5-MoE: LayerNorms, LongRoPE and sparsemixer
//! routing); configs, weight-name rules and registration. Both also read
//! GGUF files of llama.cpp's `phi2` and `phimoe` architectures (`gguf.rs`,
//! `gguf_moe.rs`).

mod gguf;
mod gguf_moe;
pub mod phi;
pub mod phimoe;

pub use phi::PhiFamily;
pub use phimoe::PhiMoeFamily;

#[cfg(feature = "export")]
plugin_api::export_plugin!("famlx-plugin-phi", [PhiFamily, PhiMoeFamily]);
