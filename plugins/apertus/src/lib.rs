//! The apertus plugin: Swiss AI's Apertus models ([`apertus`]).

pub mod apertus;
mod gguf;

pub use apertus::ApertusFamily;

#[cfg(feature = "export")]
plugin_api::export_plugin!("famlx-plugin-apertus", [ApertusFamily]);
