//! A "plugin" built against another ABI: it exports the version stamp by hand
//! (instead of through `export_plugin!`) with `ABI_VERSION + 1`, and nothing
//! else. The host reads the stamp first and must refuse the file, naming both
//! versions, without touching anything further.

/// The wrong ABI version stamp.
#[no_mangle]
pub extern "C" fn famlx_plugin_abi_version() -> u32 {
    plugin_api::ABI_VERSION + 1
}
