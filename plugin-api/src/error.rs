//! The error every stable trait method returns: a [`PluginError`], its
//! [`ErrorKind`] set where the failure was known (an allocation failure in
//! MLX, a missing weight, a bad config value), so the host branches on the
//! kind rather than on the message's words.

use abi_stable::std_types::RString;
use abi_stable::StableAbi;

/// What kind of failure a [`PluginError`] is: [`mlx::ErrorKind`] in a form
/// that crosses the boundary.
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// MLX could not allocate memory.
    AllocationFailure,
    /// A weight the model needs is absent from the checkpoint.
    MissingWeight,
    /// A weight or array of the wrong shape or element type.
    Shape,
    /// A config value that is missing, malformed or out of range.
    Config,
    /// The work was stopped on request.
    Interrupted,
    /// Anything else (a panic included).
    Other,
}

/// An error across the plugin boundary: its kind and the message shown to
/// the user.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct PluginError {
    /// What kind of failure this is.
    pub kind: ErrorKind,
    /// The message shown to the user.
    pub message: RString,
}

impl PluginError {
    /// An error of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<RString>) -> Self {
        PluginError { kind, message: message.into() }
    }
}

impl std::fmt::Display for PluginError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for PluginError {}

/// A bare message is an error of kind [`ErrorKind::Other`].
impl From<&str> for PluginError {
    fn from(m: &str) -> Self {
        PluginError::new(ErrorKind::Other, m)
    }
}

/// A bare message is an error of kind [`ErrorKind::Other`].
impl From<String> for PluginError {
    fn from(m: String) -> Self {
        PluginError::new(ErrorKind::Other, m)
    }
}

impl From<mlx::ErrorKind> for ErrorKind {
    fn from(k: mlx::ErrorKind) -> Self {
        match k {
            mlx::ErrorKind::AllocationFailure => ErrorKind::AllocationFailure,
            mlx::ErrorKind::MissingWeight => ErrorKind::MissingWeight,
            mlx::ErrorKind::Shape => ErrorKind::Shape,
            mlx::ErrorKind::Config => ErrorKind::Config,
            mlx::ErrorKind::Interrupted => ErrorKind::Interrupted,
            mlx::ErrorKind::Other => ErrorKind::Other,
        }
    }
}

impl From<ErrorKind> for mlx::ErrorKind {
    fn from(k: ErrorKind) -> Self {
        match k {
            ErrorKind::AllocationFailure => mlx::ErrorKind::AllocationFailure,
            ErrorKind::MissingWeight => mlx::ErrorKind::MissingWeight,
            ErrorKind::Shape => mlx::ErrorKind::Shape,
            ErrorKind::Config => mlx::ErrorKind::Config,
            ErrorKind::Interrupted => mlx::ErrorKind::Interrupted,
            ErrorKind::Other => mlx::ErrorKind::Other,
        }
    }
}

impl From<mlx::Error> for PluginError {
    fn from(e: mlx::Error) -> Self {
        PluginError::new(e.kind.into(), e.msg)
    }
}

impl From<PluginError> for mlx::Error {
    fn from(e: PluginError) -> Self {
        mlx::Error::new(e.kind.into(), e.message.into_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_survives_the_round_trip() {
        use mlx::ErrorKind as K;
        let all = [K::AllocationFailure, K::MissingWeight, K::Shape, K::Config, K::Interrupted, K::Other];
        for k in all {
            let e: PluginError = mlx::Error::new(k, "m").into();
            assert_eq!(e.message.as_str(), "m");
            let back: mlx::Error = e.into();
            assert_eq!((back.kind, back.msg.as_str()), (k, "m"));
        }
        assert_eq!(PluginError::from("x").kind, ErrorKind::Other);
    }
}
