//! Routed-expert layers (mixture of experts): one projection per expert,
//! stored stacked `[E, out, in]` and applied to each token's chosen experts
//! through `gather_mm` / `gather_qmm`, and the gated expert MLP built from
//! three of them. Families add their own router and combination rule.

use super::activations::GluActivation;
use super::linear::Split;
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

    /// [`SwitchLinear::load`] of this rank's part `split` of every expert
    /// (rows: a run of each expert's outputs; columns: of its inputs, on
    /// whole quantization groups), read alone from the checkpoint.
    pub fn load_split(
        w: &dyn Weights,
        prefix: &str,
        experts: i32,
        in_features: i32,
        out_features: i32,
        split: &Split,
    ) -> Result<Self> {
        let whole = Self::load(w, prefix, experts, in_features, out_features)?;
        let part = |suffix: &str, axis: i32, a: i32, b: i32| w.runs(&format!("{prefix}.{suffix}"), axis, &[(a, b)]);
        let dense = |t: Array| -> Result<SwitchLinear> {
            // As `load`: MLX's CPU gather_mm runs only in f32.
            let cpu = crate::device::backend() == crate::device::Backend::Cpu;
            Ok(SwitchLinear::Dense(if cpu && t.dtype() != Dtype::F32 { t.astype(Dtype::F32)? } else { t }))
        };
        match (split, &whole) {
            (Split::Whole, _) => Ok(whole),
            (Split::Rows(r), _) if r.len() != 1 => Err(Error::msg(format!("{prefix}: experts split one run of rows"))),
            (Split::Rows(r), SwitchLinear::Dense(_)) => dense(part("weight", 1, r[0].0, r[0].1)?),
            (Split::Rows(r), SwitchLinear::Quant(q, spec)) => {
                let (a, b) = r[0];
                Ok(SwitchLinear::Quant(
                    Quantized {
                        w: part("weight", 1, a, b)?,
                        scales: part("scales", 1, a, b)?,
                        biases: q.biases.as_ref().map(|_| part("biases", 1, a, b)).transpose()?,
                    },
                    spec.clone(),
                ))
            }
            (&Split::Cols(a, b), SwitchLinear::Dense(_)) => dense(part("weight", 2, a, b)?),
            (&Split::Cols(a, b), SwitchLinear::Quant(q, spec)) => {
                let ((wa, wb), (ga, gb)) = super::linear::quantized_inputs(prefix, spec, a, b)?;
                Ok(SwitchLinear::Quant(
                    Quantized {
                        w: part("weight", 2, wa, wb)?,
                        scales: part("scales", 2, ga, gb)?,
                        biases: q.biases.as_ref().map(|_| part("biases", 2, ga, gb)).transpose()?,
                    },
                    spec.clone(),
                ))
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
    /// Each expert's columns are split over a tensor-parallel group: the
    /// outputs are shares, summed over it.
    sum: bool,
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
        // Tensor parallel: each rank holds a run of every expert's columns
        // (whole quantization groups of down_proj), as the dense MLP does.
        let share = super::mlp::column_share(w, &format!("{prefix}.down_proj"), intermediate)?;
        let (rows, cols) = match share {
            Some((a, b)) => (Split::Rows(vec![(a, b)]), Split::Cols(a, b)),
            None => (Split::Whole, Split::Whole),
        };
        let l = |n: &str, i, o, s: &Split| SwitchLinear::load_split(w, &format!("{prefix}.{n}"), experts, i, o, s);
        Ok(SwitchGlu {
            gate: l("gate_proj", hidden, intermediate, &rows)?,
            up: l("up_proj", hidden, intermediate, &rows)?,
            down: l("down_proj", intermediate, hidden, &cols)?,
            act,
            sum: share.is_some(),
        })
    }

    /// `x` `[B, L, H]`, `inds` `[B, L, k]` (uint32) → `[B, L, k, H]`.
    pub fn forward(&self, x: &Array, inds: &Array) -> Result<Array> {
        let y = self.forward_share(x, inds)?;
        if self.sum {
            super::linear::sum_shares(&y)
        } else {
            Ok(y)
        }
    }

    /// This rank's share of [`SwitchGlu::forward`].
    fn forward_share(&self, x: &Array, inds: &Array) -> Result<Array> {
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
