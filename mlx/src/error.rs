//! The error type of every MLX call, and the check of the shim's return codes.

use std::ffi::CStr;

/// What kind of failure an [`Error`](struct@Error) is, set where the fact is known so
/// callers branch on it instead of on the message's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ErrorKind {
    /// MLX could not allocate memory (classified where the shim reports an
    /// exception).
    AllocationFailure,
    /// A weight the model needs is absent from the checkpoint.
    MissingWeight,
    /// A weight or array of the wrong shape or element type.
    Shape,
    /// A config value that is missing, malformed or out of range.
    Config,
    /// The work was stopped on request.
    Interrupted,
    /// Anything else.
    #[default]
    Other,
}

/// An error from MLX (its exception message) or from argument checks here,
/// with its [`ErrorKind`].
#[derive(Debug, Clone, thiserror::Error)]
#[error("{msg}")]
pub struct Error {
    /// The message shown to the user.
    pub msg: String,
    /// What kind of failure this is.
    pub kind: ErrorKind,
}

impl Error {
    /// An error of kind [`ErrorKind::Other`] with the given message.
    pub fn msg(m: impl Into<String>) -> Self {
        Error::new(ErrorKind::Other, m)
    }

    /// An error of `kind` with the given message.
    pub fn new(kind: ErrorKind, m: impl Into<String>) -> Self {
        Error { msg: m.into(), kind }
    }

    /// The same error with its kind set to `kind`.
    pub fn with_kind(self, kind: ErrorKind) -> Self {
        Error { kind, ..self }
    }
}

/// Result of an MLX call.
pub type Result<T> = std::result::Result<T, Error>;

/// Whether an MLX exception message is an allocation failure: `std::bad_alloc`
/// or one of MLX's allocators giving up. The shim hands over only the
/// exception's text, so this is the one place that reads it; everything past
/// here branches on [`ErrorKind::AllocationFailure`].
fn is_alloc_message(msg: &str) -> bool {
    let m = msg.to_ascii_lowercase();
    ["unable to allocate", "failed to allocate", "out of memory", "bad_alloc", "cudaerrormemoryallocation"]
        .iter()
        .any(|p| m.contains(p))
}

/// The [`Error`](struct@Error) for an exception message the shim reported, its kind
/// classified once, here.
fn from_exception(msg: String) -> Error {
    let kind = if is_alloc_message(&msg) { ErrorKind::AllocationFailure } else { ErrorKind::Other };
    Error { msg, kind }
}

/// Turns a shim return code into a `Result`, fetching MLX's message on failure.
pub(crate) fn check(rc: std::ffi::c_int) -> Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        // SAFETY: the shim keeps a NUL-terminated, thread-local message.
        let m = unsafe { CStr::from_ptr(mlx_sys::mlxs_last_error()) };
        Err(from_exception(m.to_string_lossy().into_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocation_failures_are_classified_from_the_shim_text() {
        for m in ["[malloc] Unable to allocate 4096 bytes.", "std::bad_alloc", "[metal::malloc] Out of memory"] {
            assert_eq!(from_exception(m.into()).kind, ErrorKind::AllocationFailure, "{m}");
        }
        let e = from_exception("[matmul] shapes (2,3) and (4,5) do not match".into());
        assert_eq!(e.kind, ErrorKind::Other);
        assert_eq!(e.to_string(), "[matmul] shapes (2,3) and (4,5) do not match");
    }

    #[test]
    fn the_tuple_style_constructor_is_other() {
        let e = Error::msg("x".to_string());
        assert_eq!((e.kind, e.msg.as_str()), (ErrorKind::Other, "x"));
    }
}
