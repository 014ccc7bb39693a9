//! The famlx runtime: plugin registry, checkpoint reading, caches, sampler,
//! generation loop and the pieces of the `famlx` command line.

pub mod audio;
pub mod cache;
pub mod cache_file;
pub mod checkpoint;
pub mod cli;
pub mod convert;
pub mod decode;
pub mod default_model;
pub mod distributed;
pub mod grammar;
pub mod hub;
pub mod media;
pub mod memory;
pub mod model;
pub mod plugins;
pub mod prompt;
pub mod reload;
pub mod sample;
pub mod scaffold;
pub mod serve;
pub mod session;
