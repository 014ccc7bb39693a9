//! The helium plugin: Kyutai's Helium models ([`helium`]).

pub mod helium;

pub use helium::HeliumFamily;

#[cfg(feature = "export")]
plugin_api::export_plugin!("famlx-plugin-helium", [HeliumFamily]);
