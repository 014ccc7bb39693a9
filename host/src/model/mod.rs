//! A loaded model, the weights it is built from, and a sequence's state
//! (caches, images, drafter caches) passed into each forward.

mod loaded;
mod media;
mod sequence;
mod weights;

pub use loaded::{apply_bos_convention, ForwardOn, LoadedModel};
pub use media::{ChunkMedia, MediaSpan, MediaState};
pub use sequence::{DraftCaches, RowDraft, Sequence};
pub use weights::{build, count, HostWeights};
pub(crate) use weights::{plan_and_rewrite, plugin_err, Source};
