//! The mistral3 plugin: Mistral AI's newer text models.
//! [`ministral3`]: Ministral 3 (`ministral3`), Llama's decoder with queries
//! scaled by position (Llama 4's long-context attention scaling) and YaRN;
//! [`mistral3`]: the text model of Mistral 3 checkpoints (`mistral3`:
//! Mistral Small 3.x, Ministral 3), whose vision tower is left out;
//! [`mixtral`]: Mixtral (`mixtral`), Mistral's decoder with routed experts.

mod gguf;
pub mod ministral3;
pub mod mistral3;
pub mod mixtral;
pub mod query_scale;

pub use ministral3::Ministral3Family;
pub use mistral3::Mistral3Family;
pub use mixtral::MixtralFamily;

#[cfg(feature = "export")]
plugin_api::export_plugin!("famlx-plugin-mistral3", [Mistral3Family, Ministral3Family, MixtralFamily]);
