//! A loaded model, the weights it is built from, and the images of the
//! sequence it is running.

mod loaded;
mod media;
mod weights;

pub use loaded::{apply_bos_convention, LoadedModel};
pub use media::{ChunkMedia, MediaSpan, MediaState};
pub use weights::{build, count, HostWeights};
pub(crate) use weights::{plan_and_rewrite, Source};
