//! The gated MLP and its gate/up projections (fused or split), and the
//! plain two-layer MLP.

use super::activations::{Activation, GluActivation};
use super::linear::{Linear, Split};
use super::parallel::Parallel;
use super::weights::Weights;
use crate::{Array, Result};

/// This rank's run `[start, stop)` of the `intermediate` columns of a
/// gated MLP (dense, or each routed expert) under a tensor-parallel split:
/// whole quantization groups of `down` (the projection they feed), as even
/// as groups allow. `None` without a split, or when there are too few groups
/// to give every rank some: the columns then stay whole on every rank.
pub(crate) fn column_share(w: &dyn Weights, down: &str, intermediate: i32) -> Result<Option<(i32, i32)>> {
    let Some(p) = Parallel::tensor(w.parallel()) else { return Ok(None) };
    let unit = w.quant(down).map_or(1, |q| q.group_size.max(1));
    if intermediate % unit != 0 || intermediate / unit < p.size {
        return Ok(None);
    }
    let (a, b) = p.share(intermediate / unit, "column groups")?;
    Ok(Some((a * unit, b * unit)))
}

/// The gated MLP of Llama-style models: `down(act(gate(x)) * up(x))`, with
/// SwiGLU (Llama, Qwen) or GeGLU (Gemma).
#[derive(Debug, Clone)]
pub struct GatedMlp {
    /// gate and up projections
    pub proj: GateUp,
    /// down projection
    pub down: Linear,
    /// the activation of the gate
    pub act: GluActivation,
}

/// The gate and up projections of a [`GatedMlp`]: two matrices, or one
/// whose output is both side by side (one matmul instead of two).
#[derive(Debug, Clone)]
pub enum GateUp {
    /// `gate_proj` and `up_proj`.
    Split {
        /// gate projection
        gate: Linear,
        /// up projection
        up: Linear,
    },
    /// `gate_up_proj`: gate rows first, then up rows.
    Fused {
        /// the stacked projection
        gate_up: Linear,
        /// output features of the gate half
        gate_out: i32,
    },
}

impl GateUp {
    /// Loads `{prefix}.gate_up_proj` (fused by the host at load) or
    /// `{prefix}.gate_proj` + `up_proj`, each `hidden → intermediate`, with
    /// biases when `bias`.
    pub fn load(w: &dyn Weights, prefix: &str, hidden: i32, intermediate: i32, bias: bool) -> Result<Self> {
        let fused = format!("{prefix}.gate_up_proj");
        Ok(if w.get(&format!("{fused}.weight")).is_some() {
            let gate_up = Linear::load_with_bias(w, &fused, hidden, 2 * intermediate, bias)?;
            GateUp::Fused { gate_up, gate_out: intermediate }
        } else {
            let lin = |n: &str| Linear::load_with_bias(w, &format!("{prefix}.{n}"), hidden, intermediate, bias);
            GateUp::Split { gate: lin("gate_proj")?, up: lin("up_proj")? }
        })
    }

    /// (gate(x), up(x)).
    pub fn forward(&self, x: &Array) -> Result<(Array, Array)> {
        match self {
            GateUp::Fused { gate_up, gate_out } => {
                let mut parts = gate_up.forward(x)?.split_at(&[*gate_out], -1)?;
                let up = parts.pop().expect("2 parts");
                Ok((parts.pop().expect("2 parts"), up))
            }
            GateUp::Split { gate, up } => Ok((gate.forward(x)?, up.forward(x)?)),
        }
    }
}

impl GatedMlp {
    /// Loads the gate/up projections (see [`GateUp::load`]) and `down_proj`
    /// (`intermediate → hidden`), with SwiGLU.
    pub fn load(w: &dyn Weights, prefix: &str, hidden: i32, intermediate: i32) -> Result<Self> {
        Self::load_with(w, prefix, hidden, intermediate, GluActivation::Silu)
    }

    /// [`GatedMlp::load`] with the activation `act`.
    pub fn load_with(
        w: &dyn Weights,
        prefix: &str,
        hidden: i32,
        intermediate: i32,
        act: GluActivation,
    ) -> Result<Self> {
        Self::load_biased(w, prefix, hidden, intermediate, act, false)
    }

    /// [`GatedMlp::load_with`], every projection with a bias when `bias`
    /// (required then: a checkpoint missing one is refused naming it).
    pub fn load_biased(
        w: &dyn Weights,
        prefix: &str,
        hidden: i32,
        intermediate: i32,
        act: GluActivation,
        bias: bool,
    ) -> Result<Self> {
        if let Some(share) = column_share(w, &format!("{prefix}.down_proj"), intermediate)? {
            return Self::load_share(w, prefix, hidden, intermediate, act, bias, share);
        }
        Ok(GatedMlp {
            proj: GateUp::load(w, prefix, hidden, intermediate, bias)?,
            down: Linear::load_with_bias(w, &format!("{prefix}.down_proj"), intermediate, hidden, bias)?,
            act,
        })
    }

    /// This rank's share `[a, b)` of the intermediate columns of a
    /// tensor-parallel split ([`column_share`]): gate/up split their
    /// outputs and down its inputs, summed over the group.
    fn load_share(
        w: &dyn Weights,
        prefix: &str,
        hidden: i32,
        intermediate: i32,
        act: GluActivation,
        bias: bool,
        (a, b): (i32, i32),
    ) -> Result<Self> {
        let down = format!("{prefix}.down_proj");
        let fused = format!("{prefix}.gate_up_proj");
        let proj = if w.get(&format!("{fused}.weight")).is_some() {
            let rows = Split::Rows(vec![(a, b), (intermediate + a, intermediate + b)]);
            GateUp::Fused {
                gate_up: Linear::load_split(w, &fused, hidden, 2 * intermediate, bias, &rows)?,
                gate_out: b - a,
            }
        } else {
            let rows = Split::Rows(vec![(a, b)]);
            let gate = Linear::load_split(w, &format!("{prefix}.gate_proj"), hidden, intermediate, bias, &rows)?;
            let up = Linear::load_split(w, &format!("{prefix}.up_proj"), hidden, intermediate, bias, &rows)?;
            match Linear::stack(&[&gate, &up])? {
                Some(gate_up) => GateUp::Fused { gate_up, gate_out: b - a },
                None => GateUp::Split { gate, up },
            }
        };
        let down = Linear::load_split(w, &down, intermediate, hidden, bias, &Split::Cols(a, b))?;
        Ok(GatedMlp { proj, down, act })
    }

    /// `down(act(gate(x)) * up(x))`.
    pub fn forward(&self, x: &Array) -> Result<Array> {
        let (gate, up) = self.proj.forward(x)?;
        self.down.forward(&self.act.apply(&gate, &up)?)
    }
}

/// The plain (non-gated) MLP of GPT-style models: `down(act(up(x)))`
/// (Phi's `fc1`/`fc2`, StarCoder2's `c_fc`/`c_proj`, under the names the
/// family gives).
#[derive(Debug, Clone)]
pub struct PlainMlp {
    /// input projection
    pub up: Linear,
    /// output projection
    pub down: Linear,
    /// the activation between them
    pub act: Activation,
}

impl PlainMlp {
    /// Loads `{prefix}.{up}` (`hidden → intermediate`) and `{prefix}.{down}`
    /// (`intermediate → hidden`), both with biases when `bias`.
    #[allow(clippy::too_many_arguments)]
    pub fn load(
        w: &dyn Weights,
        prefix: &str,
        (up, down): (&str, &str),
        hidden: i32,
        intermediate: i32,
        act: Activation,
        bias: bool,
    ) -> Result<Self> {
        let lin = |n: &str, i, o| Linear::load_with_bias(w, &format!("{prefix}.{n}"), i, o, bias);
        Ok(PlainMlp { up: lin(up, hidden, intermediate)?, down: lin(down, intermediate, hidden)?, act })
    }

    /// `down(act(up(x)))`.
    pub fn forward(&self, x: &Array) -> Result<Array> {
        self.down.forward(&self.act.apply(&self.up.forward(x)?)?)
    }
}
