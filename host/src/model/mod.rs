//! A loaded model and the weights it is built from.

mod loaded;
mod weights;

pub use loaded::{apply_bos_convention, LoadedModel};
pub use weights::{build, count, HostWeights};
pub(crate) use weights::{plan_and_rewrite, Source};
