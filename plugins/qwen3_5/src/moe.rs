//! The sparse MoE block of Qwen3.5-MoE: top-k softmax routing over experts
//! run through `gather_mm` / `gather_qmm`, plus a sigmoid-gated shared expert.

use mlx::nn::{GatedMlp, Linear, Weights};
use mlx::quant::{gather_qmm, QuantSpec, Quantized};
use mlx::{Array, Dtype, Error, Result};

/// Tokens x top-k at or above which tokens are sorted by expert first (as mlx-lm does).
const SORT_THRESHOLD: usize = 64;

/// One projection of every expert: weight `[E, out, in]`, dense or quantized.
#[derive(Debug, Clone)]
pub enum SwitchLinear {
    /// Dense, kept transposed as `[E, in, out]`.
    Dense(Array),
    /// Quantized.
    Quant(Quantized, QuantSpec),
}

impl SwitchLinear {
    /// Loads `{prefix}.weight` (+ scales/biases).
    pub fn load(w: &dyn Weights, prefix: &str) -> Result<Self> {
        let weight = w.require(&format!("{prefix}.weight"))?;
        match (w.get(&format!("{prefix}.scales")), w.quant(prefix)) {
            (Some(scales), Some(spec)) => Ok(SwitchLinear::Quant(
                Quantized { w: weight, scales, biases: w.get(&format!("{prefix}.biases")) },
                spec,
            )),
            (Some(_), None) => Err(Error(format!("{prefix} has scales but no quantization is declared for it"))),
            (None, _) => Ok(SwitchLinear::Dense(weight.swapaxes(-1, -2)?.contiguous()?)),
        }
    }

    /// `x` `[..., 1, in]` through the experts `idx` → `[..., 1, out]`.
    pub fn forward(&self, x: &Array, idx: &Array, sorted: bool) -> Result<Array> {
        match self {
            SwitchLinear::Dense(wt) => mlx::quant::gather_mm(x, wt, None, Some(idx), sorted),
            SwitchLinear::Quant(q, spec) => gather_qmm(x, q, spec, None, Some(idx), true, sorted),
        }
    }
}

/// The routed-expert SwiGLU MLP.
#[derive(Debug, Clone)]
pub struct SwitchGlu {
    gate: SwitchLinear,
    up: SwitchLinear,
    down: SwitchLinear,
}

impl SwitchGlu {
    /// Loads `{prefix}.{gate,up,down}_proj`.
    pub fn load(w: &dyn Weights, prefix: &str) -> Result<Self> {
        let l = |n: &str| SwitchLinear::load(w, &format!("{prefix}.{n}"));
        Ok(SwitchGlu { gate: l("gate_proj")?, up: l("up_proj")?, down: l("down_proj")? })
    }

    /// `x` `[B, L, H]`, `inds` `[B, L, k]` → `[B, L, k, H]`.
    pub fn forward(&self, x: &Array, inds: &Array) -> Result<Array> {
        let x = x.expand_dims(&[-2, -3])?; // [B, L, 1, 1, H]
        let shape = inds.shape().to_vec();
        let k = *shape.last().expect("indices have a k axis");
        if inds.size() >= SORT_THRESHOLD {
            // Sort the (token, slot) pairs by expert so each expert's rows are contiguous.
            let flat = inds.flatten(0, -1)?;
            let order = flat.argsort(0)?;
            let inv = order.argsort(0)?;
            let rows = order.floor_divide(&Array::scalar_i(k as i64, order.dtype())?)?;
            let xs = x.flatten(0, -3)?.take(&rows, 0)?; // [N*k, 1, H]
            let idx = flat.take(&order, 0)?;
            let h = mlx::nn::swiglu(&self.gate.forward(&xs, &idx, true)?, &self.up.forward(&xs, &idx, true)?)?;
            let y = self.down.forward(&h, &idx, true)?.take(&inv, 0)?; // [N*k, 1, H]
            let mut out_shape = shape.clone();
            out_shape.push(y.dim(-1));
            return y.reshape(&out_shape);
        }
        let h = mlx::nn::swiglu(&self.gate.forward(&x, inds, false)?, &self.up.forward(&x, inds, false)?)?;
        self.down.forward(&h, inds, false)?.squeeze(&[-2])
    }
}

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
