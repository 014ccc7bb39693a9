//! famlx: LLM inference on Apple's MLX. A model family is a plugin; the
//! host reads checkpoints, builds the model the family plans, and runs it.
//!
//! The library's surface:
//! - [`Registry`] finds the family plugins ([`search_dirs`] says where);
//!   [`LoadedModel::load`] opens a checkpoint with them.
//! - [`Session`] generates from a loaded model, keeping its caches warm
//!   across turns; [`GenParams`] (with [`SamplerParams`]) says how, and
//!   [`GenStats`] what came out and why it stopped ([`FinishReason`]).
//! - [`engine`] is the continuous-batching engine for a front end that
//!   serves many requests at once (`famlx serve` is one).
//!
//! ```no_run
//! use famlx::{search_dirs, CacheOptions, GenParams, LoadedModel, Registry, Session};
//! use std::path::Path;
//!
//! fn main() -> anyhow::Result<()> {
//!     let registry = Registry::discover(&search_dirs(&[]));
//!     let path = Path::new("models/Llama-3.2-1B-Instruct-4bit");
//!     let model = LoadedModel::load(path, &registry, None, CacheOptions::default())?;
//!     let tokenizer = model.tokenizer()?.clone();
//!     let ids = tokenizer.encode("The capital of France is", true)?;
//!     let params = GenParams { max_tokens: 32, stop_ids: tokenizer.eos_ids(), ..GenParams::default() };
//!     let mut session = Session::new(model)?;
//!     let (stats, _) = session.generate(&ids, &params, |_| true)?;
//!     println!("{} ({:?})", tokenizer.decode(&stats.tokens, true)?, stats.finish);
//!     Ok(())
//! }
//! ```
//!
//! The other modules are the `famlx` binary's and the tests' (hidden from
//! these docs, not a stable API) or the crate's own.

pub mod engine;

pub use cache::CacheOptions;
pub use decode::{FinishReason, GenParams, GenStats};
pub use model::LoadedModel;
pub use plugins::{search_dirs, Registry};
pub use sample::SamplerParams;
pub use session::Session;

// Reached by the binary (cli), the integration tests, the benches and the
// fuzz targets.
#[doc(hidden)]
pub mod audio;
#[doc(hidden)]
pub mod cache;
#[doc(hidden)]
pub mod checkpoint;
#[doc(hidden)]
pub mod cli;
#[doc(hidden)]
pub mod decode;
#[doc(hidden)]
pub mod default_model;
#[doc(hidden)]
pub mod distributed;
#[doc(hidden)]
pub mod grammar;
#[doc(hidden)]
pub mod model;
#[doc(hidden)]
pub mod plugins;
#[doc(hidden)]
pub mod prompt;
#[doc(hidden)]
pub mod sample;
#[doc(hidden)]
pub mod serve;
#[doc(hidden)]
pub mod session;

// The crate's own.
mod convert;
mod hub;
mod image_file;
mod memory;
mod reload;
mod scaffold;
