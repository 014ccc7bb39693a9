//! The internlm3 plugin: Shanghai AI Lab's InternLM 3 models ([`internlm3`]).

pub mod internlm3;

pub use internlm3::InternLm3Family;

#[cfg(feature = "export")]
plugin_api::export_plugin!("famlx-plugin-internlm3", [InternLm3Family]);
