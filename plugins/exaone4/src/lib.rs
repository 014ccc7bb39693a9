//! The exaone4 plugin: EXAONE 4.0 ([`exaone4`]).

pub mod exaone4;
mod gguf;

pub use exaone4::Exaone4Family;

#[cfg(feature = "export")]
plugin_api::export_plugin!("famlx-plugin-exaone4", [Exaone4Family]);
