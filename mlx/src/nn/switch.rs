//! Routed-expert layers (mixture of experts): one projection per expert,
//! stored stacked `[E, out, in]` and applied to each token's chosen experts
//! through `gather_mm` / `gather_qmm`, and the gated expert MLP built from
//! three of them. Families add their own router and combination rule.

use super::activations::GluActivation;
use super::weights::{Kind, Weights};
use crate::quant::{gather_mm, gather_qmm, QuantSpec, Quantized};
use crate::{Array, Dtype, Error, Result};

/// Tokens x top-k at or above which tokens are sorted by expert first (as mlx-lm does).
const SORT_THRESHOLD: usize = 64;

/// One projection of every expert: weight `[E, out, in]`, dense or quantized.
#[derive(Debug, Clone)]
pub enum SwitchLinear {
    /// Dense, kept as stored, `[E, out, in]`; each call reads a transposed
    /// view (no copy: MLX's GPU gather_mm takes it as is and uses its gemv
    /// for single-token decode only in that layout).
    Dense(Array),
    /// Quantized.
    Quant(Quantized, QuantSpec),
}

impl SwitchLinear {
    /// Loads `{prefix}.weight` (+ scales/biases): `experts` stacked
    /// `in_features → out_features` projections, checked against those.
    pub fn load(w: &dyn Weights, prefix: &str, experts: i32, in_features: i32, out_features: i32) -> Result<Self> {
        match super::linear::quantized(w, prefix, &[experts, out_features], in_features)? {
            Some((q, spec)) => Ok(SwitchLinear::Quant(q, spec)),
            None => {
                let mut w =
                    w.tensor(&format!("{prefix}.weight"), &[experts, out_features, in_features], Kind::Float)?;
                // MLX's CPU gather_mm runs only in f32: keep an f32 copy there
                // (forward computes in f32 and rounds back) rather than fail
                // at eval time.
                if crate::device::backend() == crate::device::Backend::Cpu && w.dtype() != Dtype::F32 {
                    w = w.astype(Dtype::F32)?;
                }
                Ok(SwitchLinear::Dense(w))
            }
        }
    }

    /// `x` `[..., 1, in]` through the experts `idx` → `[..., 1, out]`.
    pub fn forward(&self, x: &Array, idx: &Array, sorted: bool) -> Result<Array> {
        match self {
            SwitchLinear::Dense(w) => {
                let wt = w.swapaxes(-1, -2)?;
                if w.dtype() == Dtype::F32 && x.dtype() != Dtype::F32 {
                    gather_mm(&x.astype(Dtype::F32)?, &wt, None, Some(idx), sorted)?.astype(x.dtype())
                } else {
                    gather_mm(x, &wt, None, Some(idx), sorted)
                }
            }
            SwitchLinear::Quant(q, spec) => gather_qmm(x, q, spec, None, Some(idx), true, sorted),
        }
    }
}

/// The routed-expert gated MLP: `down(act(gate(x)) * up(x))` per chosen expert.
#[derive(Debug, Clone)]
pub struct SwitchGlu {
    gate: SwitchLinear,
    up: SwitchLinear,
    down: SwitchLinear,
    act: GluActivation,
}

impl SwitchGlu {
    /// Loads `{prefix}.{gate,up,down}_proj` of `experts` experts
    /// (`hidden → intermediate → hidden`) with the activation `act`.
    pub fn load(
        w: &dyn Weights,
        prefix: &str,
        experts: i32,
        hidden: i32,
        intermediate: i32,
        act: GluActivation,
    ) -> Result<Self> {
        let l = |n: &str, i, o| SwitchLinear::load(w, &format!("{prefix}.{n}"), experts, i, o);
        Ok(SwitchGlu {
            gate: l("gate_proj", hidden, intermediate)?,
            up: l("up_proj", hidden, intermediate)?,
            down: l("down_proj", intermediate, hidden)?,
            act,
        })
    }

    /// `x` `[B, L, H]`, `inds` `[B, L, k]` (uint32) → `[B, L, k, H]`.
    pub fn forward(&self, x: &Array, inds: &Array) -> Result<Array> {
        let x = x.expand_dims(&[-2, -3])?; // [B, L, 1, 1, H]
        let shape = inds.shape().to_vec();
        let k = *shape.last().ok_or_else(|| Error::msg("switch_glu: expert indices have no k axis"))?;
        if inds.size() >= SORT_THRESHOLD {
            // Sort the (token, slot) pairs by expert so each expert's rows are contiguous.
            let flat = inds.flatten(0, -1)?;
            let order = flat.argsort(0)?;
            let inv = order.argsort(0)?;
            let rows = order.floor_divide(&Array::scalar_i(k as i64, order.dtype())?)?;
            let xs = x.flatten(0, -3)?.take(&rows, 0)?; // [N*k, 1, H]
            let idx = flat.take(&order, 0)?;
            let h = self.act.apply(&self.gate.forward(&xs, &idx, true)?, &self.up.forward(&xs, &idx, true)?)?;
            let y = self.down.forward(&h, &idx, true)?.take(&inv, 0)?; // [N*k, 1, H]
            let mut out_shape = shape.clone();
            out_shape.push(y.dim(-1));
            return y.reshape(&out_shape);
        }
        let h = self.act.apply(&self.gate.forward(&x, inds, false)?, &self.up.forward(&x, inds, false)?)?;
        self.down.forward(&h, inds, false)?.squeeze(&[-2])
    }
}
