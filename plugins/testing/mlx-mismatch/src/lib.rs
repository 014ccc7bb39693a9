//! A "plugin" built against another MLX: it exports the stamps by hand
//! (instead of through `export_plugin!`), the right ABI version and the MLX
//! version [`MLX_VERSION`], and nothing else. The host must refuse the file,
//! naming both MLX versions, without touching anything further.

/// The MLX version this "plugin" claims (never the host's).
pub const MLX_VERSION: &std::ffi::CStr = c"0.0.1";

/// The (correct) ABI version stamp.
#[no_mangle]
pub extern "C" fn famlx_plugin_abi_version() -> u32 {
    plugin_api::ABI_VERSION
}

/// The wrong MLX version stamp: [`MLX_VERSION`].
#[no_mangle]
pub extern "C" fn famlx_plugin_mlx_version() -> *const std::ffi::c_char {
    MLX_VERSION.as_ptr()
}
