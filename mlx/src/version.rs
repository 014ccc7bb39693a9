//! Which MLX this crate was built against and which one is loaded.

use crate::error::{Error, Result};
use std::ffi::CStr;

/// The MLX version the shim was compiled against.
pub fn build_version() -> &'static str {
    // SAFETY: static string in the shim.
    unsafe { CStr::from_ptr(mlx_sys::mlxs_build_version()) }.to_str().unwrap_or("?")
}

/// The version of the `libmlx` actually loaded in this process.
pub fn runtime_version() -> String {
    // SAFETY: MLX returns a static string.
    unsafe { CStr::from_ptr(mlx_sys::mlxs_runtime_version()) }.to_string_lossy().into_owned()
}

/// Checks that the loaded `libmlx` is the version this code was built for.
///
/// Hosts call this once at start; a mismatch would otherwise show up as
/// crashes or wrong numerics far from the cause.
pub fn check_runtime() -> Result<()> {
    let (b, r) = (build_version(), runtime_version());
    let r_base = r.split(['.', '+']).take(3).collect::<Vec<_>>().join(".");
    if r_base != b {
        return Err(Error::msg(format!(
            "MLX version mismatch: famlx was built for MLX {b} but loaded libmlx {r} (check LD_LIBRARY_PATH / MLX_DIR)"
        )));
    }
    Ok(())
}

/// Where the `libmlx` linked at build time lives.
pub fn build_libdir() -> &'static str {
    mlx_sys::MLX_LIBDIR
}
