//! The famlx runtime: plugin registry, checkpoint reading, caches, sampler,
//! generation loop and the pieces of the `famlx` command line.

pub mod bench;
pub mod cache;
pub mod chat;
pub mod checkpoint;
pub mod cli;
pub mod default_model;
pub mod generate;
pub mod memory;
pub mod model;
pub mod plugins;
pub mod prompt;
pub mod prompt_cache;
pub mod reload;
pub mod sample;
pub mod session;
pub mod speculative;
