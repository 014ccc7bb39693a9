//! Hot-reload test plugin, build B (see `../reload/family.rs`).

/// The token this build favours.
const BIAS: Option<i32> = Some(7);

#[path = "../../common/decoder.rs"]
mod decoder;
#[path = "../../reload/family.rs"]
mod family;

plugin_api::export_plugin!("famlx-testplugin-reload-b", [family::ReloadFamily]);
