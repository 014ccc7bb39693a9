//! The OLMo family plugin (AI2's open models): `olmo2` (post-norm blocks,
//! q/k norms over the whole projection), `olmo3` (the same block with
//! sliding-window layers) and `olmoe` (pre-norm blocks, mixture of experts).

mod gguf;
pub mod olmo2;
pub mod olmo3;
pub mod olmoe;

pub use olmo2::Olmo2Family;
pub use olmo3::Olmo3Family;
pub use olmoe::OlmoeFamily;

#[cfg(feature = "export")]
plugin_api::export_plugin!("famlx-plugin-olmo", [Olmo2Family, Olmo3Family, OlmoeFamily]);
