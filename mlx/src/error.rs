//! The error type of every MLX call, and the check of the shim's return codes.

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
