//! Cache-aware layers shared by families: attention over a host cache slot
//! (with every option the in-tree families need), the per-head norm and rope
//! helpers of decode, the shared decoder (pre-norm, sandwich, post-norm
//! and parallel blocks), the sparse mixture of experts, the fusions a family asks the
//! host for, the small-LM drafter and the stages of a pipeline split.

mod attention;
mod decoder;
mod drafter;
mod experts;
mod fusion;
mod head_norms;
mod media;
mod moe;
mod pipeline;
mod rotary;

pub use attention::{mask_for, mask_with_overlay, Attention, AttentionShape, Qkv, SharedKv};
pub use decoder::{
    lm_output, BlockLayout, BlockNorms, DecoderBlock, DecoderLm, DecoderShape, DecoderSpec, FeedForward, LogitOps,
};
pub use drafter::LmDrafter;
pub use experts::PerExpert;
pub use fusion::{decoder_fusions, gate_up_fusion, qkv_fusion};
pub use head_norms::{rope_one_token, HeadNorms};
pub use media::splice_rows;
pub use moe::{MoeShape, Routing, SparseMoe};
pub use pipeline::Stage;
pub use rotary::Rotary;
