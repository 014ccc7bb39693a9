//! The sparse MoE block of Qwen3.5-MoE: the SDK's [`SparseMoe`] with softmax
//! top-k routing and a sigmoid-gated shared expert, its experts read stacked
//! (mlx-lm's `switch_mlp`) or one by one (`experts.{i}`, how some Hugging
//! Face MTP heads store them).

use crate::config::MoeConfig;
use mlx::nn::{GluActivation, Weights};
use mlx::Result;
use plugin_api::layers::{MoeShape, PerExpert, Routing, SparseMoe};

/// Loads `{prefix}.{gate,switch_mlp,shared_expert,shared_expert_gate}` over
/// a `hidden`-wide residual stream.
pub fn load(w: &dyn Weights, prefix: &str, hidden: i32, m: &MoeConfig) -> Result<SparseMoe> {
    let w = PerExpert::stacked(w, prefix, m.num_experts, &PerExpert::GATE_UP_DOWN)?;
    let shape = MoeShape {
        hidden,
        experts: m.num_experts,
        top_k: m.top_k,
        intermediate: m.intermediate,
        routing: Routing::SoftmaxTopK { norm_topk: m.norm_topk_prob },
        act: GluActivation::Silu,
        shared_intermediate: Some(m.shared_intermediate),
        shared_gate: true,
    };
    SparseMoe::load(&w, prefix, &shape)
}
