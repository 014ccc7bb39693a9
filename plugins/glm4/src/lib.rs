//! The glm4 plugin: GLM-4-0414 ([`glm4`]).

mod gguf;
pub mod glm4;

pub use glm4::Glm4Family;

#[cfg(feature = "export")]
plugin_api::export_plugin!("famlx-plugin-glm4", [Glm4Family]);
