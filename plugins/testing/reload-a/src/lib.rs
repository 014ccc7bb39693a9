//! Hot-reload test plugin, build A (see `../reload/family.rs`).

/// The token this build favours.
const BIAS: Option<i32> = None;

#[path = "../../common/decoder.rs"]
mod decoder;
#[path = "../../reload/family.rs"]
mod family;

plugin_api::export_plugin!("famlx-testplugin-reload-a", [family::ReloadFamily]);
