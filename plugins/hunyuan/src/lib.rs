//! The hunyuan plugin: Tencent's Hunyuan models; [`hunyuan_v1_dense`]: the
//! dense ones (`hunyuan_v1_dense`).

mod gguf;
pub mod hunyuan_v1_dense;

pub use hunyuan_v1_dense::HunyuanV1DenseFamily;

#[cfg(feature = "export")]
plugin_api::export_plugin!("famlx-plugin-hunyuan", [HunyuanV1DenseFamily]);
