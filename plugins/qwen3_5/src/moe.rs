//! The sparse MoE block of Qwen3.5-MoE: top-k softmax routing over experts
//! run through `gather_mm` / `gather_qmm`, plus a sigmoid-gated shared expert.

use mlx::nn::{GatedMlp, Linear, Weights};
use mlx::{Array, Dtype, Result};

// The expert layers live in mlx::nn (shared with gemma4); re-exported so
// this module's public items stay as they were.
pub use mlx::nn::{SwitchGlu, SwitchLinear};

/// Routed experts plus the shared expert.
#[derive(Debug, Clone)]
pub struct SparseMoe {
    router: Linear,
    experts: SwitchGlu,
    shared: GatedMlp,
    shared_gate: Linear,
    top_k: i32,
    norm_topk: bool,
}

impl SparseMoe {
    /// Loads `{prefix}.{gate,switch_mlp,shared_expert,shared_expert_gate}`.
    pub fn load(w: &dyn Weights, prefix: &str, top_k: i32, norm_topk: bool) -> Result<Self> {
        Ok(SparseMoe {
            router: Linear::load(w, &format!("{prefix}.gate"))?,
            experts: SwitchGlu::load(w, &format!("{prefix}.switch_mlp"))?,
            shared: GatedMlp::load(w, &format!("{prefix}.shared_expert"))?,
            shared_gate: Linear::load(w, &format!("{prefix}.shared_expert_gate"))?,
            top_k,
            norm_topk,
        })
    }

    /// `x` `[B, L, H]` → `[B, L, H]`.
    pub fn forward(&self, x: &Array) -> Result<Array> {
        let gates = self.router.forward(x)?.softmax(&[-1], true)?;
        let e = gates.dim(-1);
        let k = self.top_k;
        let inds = gates.argpartition(e - k, -1)?;
        let inds = inds.slice_axis(-1, e - k, e)?;
        let mut scores = gates.take_along_axis(&inds, -1)?;
        if self.norm_topk {
            scores = scores.div(&scores.sum(&[-1], true)?)?;
        }
        let y = self.experts.forward(x, &inds.astype(Dtype::U32)?)?;
        let y = y.mul(&scores.expand_dims(&[-1])?)?.sum(&[-2], false)?;
        let shared = self.shared.forward(x)?.mul(&self.shared_gate.forward(x)?.sigmoid()?)?;
        y.add(&shared)
    }
}
