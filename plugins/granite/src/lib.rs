//! The Granite family plugin (IBM Granite 3): `granite` (a Llama-style
//! decoder with embedding, attention, residual and logit multipliers) and
//! `granitemoe` (the same with mixture-of-experts MLPs).

mod gguf;
pub mod granite;
pub mod granitemoe;

pub use granite::GraniteFamily;
pub use granitemoe::GraniteMoeFamily;

#[cfg(feature = "export")]
plugin_api::export_plugin!("famlx-plugin-granite", [GraniteFamily, GraniteMoeFamily]);
