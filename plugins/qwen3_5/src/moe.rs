//! The sparse MoE block of Qwen3.5-MoE: top-k softmax routing over experts
//! run through `gather_mm` / `gather_qmm`, plus a sigmoid-gated shared expert.

use crate::config::MoeConfig;
use mlx::nn::{GatedMlp, GluActivation, Linear, SwitchGlu, Weights};
use mlx::quant::QuantSpec;
use mlx::{Array, Dtype, Error, Result};
use std::collections::HashMap;

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
    /// Loads `{prefix}.{gate,switch_mlp,shared_expert,shared_expert_gate}`
    /// over a `hidden`-wide residual stream.
    pub fn load(w: &dyn Weights, prefix: &str, hidden: i32, m: &MoeConfig) -> Result<Self> {
        Ok(SparseMoe {
            router: Linear::load(w, &format!("{prefix}.gate"), hidden, m.num_experts)?,
            experts: {
                let stacked = StackedExperts::new(w, prefix)?;
                let w: &dyn Weights = match &stacked {
                    Some(s) => s,
                    None => w,
                };
                let p = format!("{prefix}.switch_mlp");
                SwitchGlu::load(w, &p, m.num_experts, hidden, m.intermediate, GluActivation::Silu)?
            },
            shared: GatedMlp::load(w, &format!("{prefix}.shared_expert"), hidden, m.shared_intermediate)?,
            shared_gate: Linear::load(w, &format!("{prefix}.shared_expert_gate"), hidden, 1)?,
            top_k: m.top_k,
            norm_topk: m.norm_topk_prob,
        })
    }

    /// `x` `[B, L, H]` → `[B, L, H]`.
    pub fn forward(&self, x: &Array) -> Result<Array> {
        let gates = self.router.forward(x)?.softmax(&[-1], true)?;
        let inds = gates.top_k_indices(self.top_k)?;
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

/// Weights with per-expert tensors `{prefix}.experts.{i}.{proj}.{weight,
/// scales,biases}` (how some Hugging Face MTP heads store their experts)
/// stacked over `i = 0, 1, ...` and offered as `{prefix}.switch_mlp.{proj}.*`.
struct StackedExperts<'a> {
    inner: &'a dyn Weights,
    extra: HashMap<String, Array>,
    quant: HashMap<String, QuantSpec>,
}

impl<'a> StackedExperts<'a> {
    /// `None` when `w` already has stacked experts or no per-expert ones.
    fn new(w: &'a dyn Weights, prefix: &str) -> Result<Option<Self>> {
        if w.get(&format!("{prefix}.switch_mlp.gate_proj.weight")).is_some()
            || w.get(&format!("{prefix}.experts.0.gate_proj.weight")).is_none()
        {
            return Ok(None);
        }
        let mut extra = HashMap::new();
        let mut quant = HashMap::new();
        for proj in ["gate_proj", "up_proj", "down_proj"] {
            let to = format!("{prefix}.switch_mlp.{proj}");
            for part in ["weight", "scales", "biases"] {
                let mut parts = Vec::new();
                while let Some(a) = w.get(&format!("{prefix}.experts.{}.{proj}.{part}", parts.len())) {
                    parts.push(a);
                }
                if part == "weight" && parts.is_empty() {
                    return Err(Error::new(
                        mlx::ErrorKind::MissingWeight,
                        format!("missing weight {prefix}.experts.0.{proj}.weight"),
                    ));
                }
                if !parts.is_empty() {
                    extra.insert(format!("{to}.{part}"), mlx::stack(&parts.iter().collect::<Vec<_>>(), 0)?);
                }
            }
            if let Some(q) = w.quant(&format!("{prefix}.experts.0.{proj}")) {
                quant.insert(to, q);
            }
        }
        Ok(Some(StackedExperts { inner: w, extra, quant }))
    }
}

impl Weights for StackedExperts<'_> {
    fn get(&self, name: &str) -> Option<Array> {
        self.extra.get(name).cloned().or_else(|| self.inner.get(name))
    }
    fn quant(&self, prefix: &str) -> Option<QuantSpec> {
        self.quant.get(prefix).cloned().or_else(|| self.inner.quant(prefix))
    }
    fn parallel(&self) -> Option<mlx::nn::Parallel> {
        self.inner.parallel()
    }
    fn slice(&self, name: &str, axis: i32, start: i32, stop: i32) -> Result<Option<Array>> {
        match self.extra.get(name) {
            Some(t) => t.slice_axis(axis, start, stop).map(Some),
            None => self.inner.slice(name, axis, start, stop),
        }
    }
}
