//! Checkpoint file formats, read and checked in pure Rust.
//!
//! A model file from the internet must never crash famlx. MLX's own readers
//! trust the headers they are given, so everything here validates a file's
//! whole structure (counts, lengths, shapes, offsets, alignment, sizes)
//! against the file's real size before any tensor is read, and every error
//! is one line naming what is wrong.
//!
//! * [`gguf`]: llama.cpp's single-file format: metadata, tensor layout and
//!   the decoding of its block-quantized tensors.
//! * [`safetensors`]: the header of a safetensors file.
//! * [`hub`]: what a Hugging Face hub server answers (commit, ETag, sizes,
//!   file names) and the revision a user types, checked before any of it
//!   becomes a path in the cache.
//! * [`input`]: how every file a user names is opened: regular files
//!   only, each kind up to its size bound.

pub mod gguf;
pub mod hub;
pub mod input;
pub mod safetensors;

use std::fmt;

/// A format error: one line, naming the key, tensor or field at fault (the
/// caller prefixes the file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(pub String);

impl Error {
    /// An error with this message.
    pub fn new(msg: impl Into<String>) -> Error {
        Error(msg.into())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The largest dimension MLX can hold (its shapes are `int32`).
pub const MAX_DIM: u64 = i32::MAX as u64;
