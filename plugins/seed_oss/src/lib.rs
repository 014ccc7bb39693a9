//! The seed_oss plugin: ByteDance's Seed-OSS models ([`seed_oss`]).

mod gguf;
pub mod seed_oss;

pub use seed_oss::SeedOssFamily;

#[cfg(feature = "export")]
plugin_api::export_plugin!("famlx-plugin-seed_oss", [SeedOssFamily]);
