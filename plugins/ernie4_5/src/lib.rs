//! The ernie4_5 plugin: Baidu's ERNIE 4.5 models. [`ernie4_5`]: the dense
//! ones (`ernie4_5`); [`ernie4_5_moe`]: the mixtures of experts
//! (`ernie4_5_moe`), on the same decoder.

pub mod ernie4_5;
pub mod ernie4_5_moe;
mod gguf;

pub use ernie4_5::Ernie45Family;
pub use ernie4_5_moe::Ernie45MoeFamily;

#[cfg(feature = "export")]
plugin_api::export_plugin!("famlx-plugin-ernie4_5", [Ernie45Family, Ernie45MoeFamily]);
