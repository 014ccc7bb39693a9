//! Safe Rust over MLX: the array type, ops, `fast` kernels, quantization,
//! random numbers, io, compile, devices, memory, custom kernels, and the
//! neural-network layers every famlx family shares.
//!
//! Every fallible call returns [`Result`]; a C++ exception inside MLX becomes
//! an [`Error`] carrying MLX's message, never an abort.

mod array;
pub mod compile;
pub mod device;
mod dtype;
pub mod fast;
pub mod io;
pub mod kernel;
pub mod memory;
pub mod nn;
mod ops;
pub mod quant;
pub mod random;

pub use array::Array;
pub use dtype::{Dtype, Element};
pub use ops::*;

use std::ffi::CStr;

/// An error from MLX (its exception message) or from argument checks here.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct Error(pub String);

impl Error {
    /// An error with the given message.
    pub fn msg(m: impl Into<String>) -> Self {
        Error(m.into())
    }
}

/// Result of an MLX call.
pub type Result<T> = std::result::Result<T, Error>;

/// Turns a shim return code into a `Result`, fetching MLX's message on failure.
pub(crate) fn check(rc: std::ffi::c_int) -> Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        // SAFETY: the shim keeps a NUL-terminated, thread-local message.
        let m = unsafe { CStr::from_ptr(mlx_sys::mlxs_last_error()) };
        Err(Error(m.to_string_lossy().into_owned()))
    }
}

/// Runs a shim call that writes one array handle.
pub(crate) fn out1(f: impl FnOnce(*mut mlx_sys::mlxs_array) -> std::ffi::c_int) -> Result<Array> {
    let mut out: mlx_sys::mlxs_array = std::ptr::null_mut();
    check(f(&mut out))?;
    // SAFETY: on success the shim wrote a fresh owned handle.
    Ok(unsafe { Array::from_raw(out) })
}

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
        return Err(Error(format!(
            "MLX version mismatch: famlx was built for MLX {b} but loaded libmlx {r} (check LD_LIBRARY_PATH / MLX_DIR)"
        )));
    }
    Ok(())
}

/// Where the `libmlx` linked at build time lives.
pub fn build_libdir() -> &'static str {
    mlx_sys::MLX_LIBDIR
}
