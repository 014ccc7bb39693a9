//! The sparse mixture-of-experts feed-forward most MoE families share: a
//! linear router, top-k routing, the chosen experts run through
//! `gather_mm` / `gather_qmm` ([`SwitchGlu`]), and an optional shared expert
//! (itself optionally gated by a sigmoid).

use super::decoder::FeedForward;
use mlx::nn::{GatedMlp, GluActivation, Linear, SwitchGlu, Weights};
use mlx::{Array, Dtype, Result};

/// How the router's logits choose and weigh the experts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Routing {
    /// Softmax over every expert, then the top k; their weights renormalised
    /// to sum to 1 when `norm_topk` (Qwen2/3-MoE, OLMoE).
    SoftmaxTopK {
        /// renormalise the chosen weights (`norm_topk_prob`)
        norm_topk: bool,
    },
    /// The top k logits, then a softmax over just those (Mixtral, Granite-MoE).
    TopKSoftmax,
}

impl Routing {
    /// The chosen experts `[.., k]` (uint32) and their weights `[.., k]`
    /// from router logits `[.., experts]`.
    pub fn route(self, logits: &Array, k: i32) -> Result<(Array, Array)> {
        match self {
            Routing::SoftmaxTopK { norm_topk } => {
                let gates = logits.softmax(&[-1], true)?;
                let inds = gates.top_k_indices(k)?;
                let mut scores = gates.take_along_axis(&inds, -1)?;
                if norm_topk {
                    scores = scores.div(&scores.sum(&[-1], true)?)?;
                }
                Ok((inds.astype(Dtype::U32)?, scores))
            }
            Routing::TopKSoftmax => {
                let inds = logits.top_k_indices(k)?;
                let scores = logits.take_along_axis(&inds, -1)?.softmax(&[-1], true)?;
                Ok((inds.astype(Dtype::U32)?, scores))
            }
        }
    }
}

/// The shape of a [`SparseMoe`], from the model's config.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MoeShape {
    /// Width of the residual stream.
    pub hidden: i32,
    /// Routed experts.
    pub experts: i32,
    /// Experts per token.
    pub top_k: i32,
    /// Width of each routed expert's MLP.
    pub intermediate: i32,
    /// How the router chooses.
    pub routing: Routing,
    /// The experts' activation.
    pub act: GluActivation,
    /// Width of the shared expert (`None`: none).
    pub shared_intermediate: Option<i32>,
    /// The shared expert's output is gated by `sigmoid(shared_expert_gate(x))`.
    pub shared_gate: bool,
}

/// Routed experts, plus a shared expert where the family has one.
#[derive(Debug, Clone)]
pub struct SparseMoe {
    /// router: hidden → experts
    pub router: Linear,
    /// the routed experts, stacked
    pub experts: SwitchGlu,
    /// the shared expert
    pub shared: Option<GatedMlp>,
    /// its sigmoid gate: hidden → 1
    pub shared_gate: Option<Linear>,
    /// experts per token
    pub top_k: i32,
    /// how the router chooses
    pub routing: Routing,
}

impl SparseMoe {
    /// Loads `{prefix}.gate` (the router), `{prefix}.switch_mlp.{gate,up,down}_proj`
    /// (mlx-lm's stacked experts) and, as `shape` says, `{prefix}.shared_expert`
    /// and `{prefix}.shared_expert_gate`.
    pub fn load(w: &dyn Weights, prefix: &str, shape: &MoeShape) -> Result<SparseMoe> {
        let s = shape;
        let shared = s
            .shared_intermediate
            .map(|i| GatedMlp::load_with(w, &format!("{prefix}.shared_expert"), s.hidden, i, s.act))
            .transpose()?;
        let shared_gate = (s.shared_intermediate.is_some() && s.shared_gate)
            .then(|| Linear::load(w, &format!("{prefix}.shared_expert_gate"), s.hidden, 1))
            .transpose()?;
        Ok(SparseMoe {
            router: Linear::load(w, &format!("{prefix}.gate"), s.hidden, s.experts)?,
            experts: SwitchGlu::load(w, &format!("{prefix}.switch_mlp"), s.experts, s.hidden, s.intermediate, s.act)?,
            shared,
            shared_gate,
            top_k: s.top_k,
            routing: s.routing,
        })
    }

    /// The routed experts' weighted sum for `x` `[B, L, H]`, given the
    /// chosen experts and weights (for families that route their own way).
    pub fn mix(&self, x: &Array, inds: &Array, scores: &Array) -> Result<Array> {
        let y = self.experts.forward(x, inds)?;
        y.mul(&scores.expand_dims(&[-1])?)?.sum(&[-2], false)
    }
}

impl FeedForward for SparseMoe {
    fn forward(&self, x: &Array) -> Result<Array> {
        let (inds, scores) = self.routing.route(&self.router.forward(x)?, self.top_k)?;
        let y = self.mix(x, &inds, &scores)?;
        match (&self.shared, &self.shared_gate) {
            (Some(s), Some(g)) => y.add(&s.forward(x)?.mul(&g.forward(x)?.sigmoid()?)?),
            (Some(s), None) => y.add(&s.forward(x)?),
            _ => Ok(y),
        }
    }
}
