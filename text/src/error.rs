//! The crate's error type.

/// An error from loading a tokenizer, encoding/decoding or rendering a chat template.
///
/// The message is a single line and names the file or field at fault, so a host can show it
/// to a user as is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Error(String);

impl Error {
    /// Builds an error from a message; newlines are folded so the message stays one line.
    pub fn new(msg: impl Into<String>) -> Error {
        let msg: String = msg.into();
        if msg.contains('\n') || msg.contains('\r') {
            // Underlying errors (minijinja, serde) may span several lines; keep ours to one.
            let folded: Vec<&str> = msg.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
            Error(folded.join(" | "))
        } else {
            Error(msg)
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.0
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
