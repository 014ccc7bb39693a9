//! Layers shared by every family: (quantized) linear and embedding, the
//! output head, norms, rotary embeddings, activations, the gated MLP and the
//! routed-expert (MoE) layers. Families build these from a [`Weights`] view
//! and never re-implement them.

mod activations;
mod head;
mod linear;
mod mlp;
mod norm;
mod parallel;
mod rope;
mod switch;
mod weights;

pub use activations::{geglu, gelu, gelu_approx, silu, swiglu, Activation, GluActivation};
pub use head::OutputHead;
pub use linear::{Embedding, Linear, Split};
pub use mlp::{GateUp, GatedMlp, PlainMlp};
pub use norm::{LayerNorm, Norm, NormKind, RmsNorm};
pub use parallel::{share, HeadShare, Parallel, ParallelMode};
pub use rope::{Rope, RopeScaling};
pub use switch::{SwitchGlu, SwitchLinear};
pub use weights::{fold_names, mismatch, summarize, Checked, Kind, Problem, Weights};
