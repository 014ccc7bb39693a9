//! Safe Rust over MLX: the array type, ops, `fast` kernels, quantization,
//! random numbers, io, compile, devices, memory, custom kernels, and the
//! neural-network layers every famlx family shares.
//!
//! Every fallible call returns [`Result`]; a C++ exception inside MLX becomes
//! an [`Error`](struct@Error) carrying MLX's message, never an abort.

mod array;
mod combine;
pub mod compile;
mod conv;
mod create;
pub mod device;
pub mod distributed;
mod dtype;
mod error;
pub mod fast;
mod fft;
pub mod io;
pub mod kernel;
pub mod memory;
pub mod nn;
mod ops;
pub mod quant;
pub mod random;
mod version;

pub(crate) use array::out1;
pub use array::Array;
pub use combine::*;
pub use conv::*;
pub use create::*;
pub use dtype::{Dtype, Element};
pub(crate) use error::check;
pub use error::{Error, ErrorKind, Result};
pub use fft::*;
pub use version::{build_libdir, build_version, check_runtime, runtime_version};
