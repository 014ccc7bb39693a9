//! The Qwen 2 line and Qwen 3's mixture of experts: `qwen2` (Qwen2,
//! Qwen2.5), `qwen2_moe` (Qwen1.5-MoE, Qwen2-MoE) and `qwen3_moe`
//! (Qwen3-30B-A3B and larger), one family each, on the shared decoder.

mod gguf;
pub mod qwen2;
pub mod qwen2_moe;
pub mod qwen3_moe;

pub use qwen2::Qwen2Family;
pub use qwen2_moe::Qwen2MoeFamily;
pub use qwen3_moe::Qwen3MoeFamily;

#[cfg(feature = "export")]
plugin_api::export_plugin!("famlx-plugin-qwen2", [Qwen2Family, Qwen2MoeFamily, Qwen3MoeFamily]);
