//! Layers shared by every family: (quantized) linear and embedding, norms,
//! rotary embeddings, the gated MLP and the routed-expert (MoE) layers. Families build these from a
//! [`Weights`] view and never re-implement them.

mod linear;
mod norm;
mod rope;
mod switch;
mod weights;

pub use linear::{Embedding, Linear};
pub use norm::{LayerNorm, RmsNorm};
pub use rope::{Rope, RopeScaling};
pub use switch::{GluActivation, SwitchGlu, SwitchLinear};
pub use weights::{fold_names, mismatch, summarize, Checked, Kind, Problem, Weights};

use crate::{Array, Result};

/// Runs `f` compiled once per thread (shapeless, so one trace serves every
/// shape), falling back to the plain ops if MLX cannot compile it.
macro_rules! compiled {
    ($f:expr, $args:expr) => {{
        // Leaked on purpose: dropping a compiled function during process exit
        // can run after MLX's own compile cache is gone.
        thread_local! {
            static FUSED: &'static Option<crate::compile::Compiled> =
                Box::leak(Box::new(crate::compile::Compiled::new($f, true).ok()));
        }
        let args: &[&Array] = $args;
        match FUSED.with(|f| f.as_ref().map(|c| c.call(args))) {
            Some(Ok(mut v)) if v.len() == 1 => Ok(v.remove(0)),
            _ => {
                let owned: Vec<Array> = args.iter().map(|a| (*a).clone()).collect();
                ($f)(&owned).map(|mut v| v.remove(0))
            }
        }
    }};
}

/// `silu(gate) * up`, the SwiGLU activation, compiled so it runs as one
/// fused kernel instead of three.
pub fn swiglu(gate: &Array, up: &Array) -> Result<Array> {
    compiled!(|a: &[Array]| Ok(vec![a[0].mul(&a[0].sigmoid()?)?.mul(&a[1])?]), &[gate, up])
}

/// `gelu_approx(gate) * up`, Gemma's GeGLU, compiled into one kernel
/// (the plain ops are nine).
pub fn geglu(gate: &Array, up: &Array) -> Result<Array> {
    compiled!(|a: &[Array]| Ok(vec![gelu_approx_ops(&a[0])?.mul(&a[1])?]), &[gate, up])
}

/// `x * sigmoid(x)`.
pub fn silu(x: &Array) -> Result<Array> {
    x.mul(&x.sigmoid()?)
}

/// The tanh approximation of GELU (`gelu_pytorch_tanh`), compiled into one
/// kernel as MLX's own `nn.gelu_approx` is.
pub fn gelu_approx(x: &Array) -> Result<Array> {
    compiled!(|a: &[Array]| Ok(vec![gelu_approx_ops(&a[0])?]), &[x])
}

fn gelu_approx_ops(x: &Array) -> Result<Array> {
    // 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))
    let c = (2.0f64 / std::f64::consts::PI).sqrt();
    let inner = x.add(&x.pow_s(3.0)?.mul_s(0.044715)?)?.mul_s(c)?;
    x.mul_s(0.5)?.mul(&inner.tanh()?.add_s(1.0)?)
}

/// The gated MLP of Llama-style models: `down(act(gate(x)) * up(x))`.
#[derive(Debug, Clone)]
pub struct GatedMlp {
    /// gate and up projections
    pub proj: GateUp,
    /// down projection
    pub down: Linear,
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
    /// `{prefix}.gate_proj` + `up_proj`, each `hidden → intermediate`.
    pub fn load(w: &dyn Weights, prefix: &str, hidden: i32, intermediate: i32) -> Result<Self> {
        let fused = format!("{prefix}.gate_up_proj");
        Ok(if w.get(&format!("{fused}.weight")).is_some() {
            let gate_up = Linear::load(w, &fused, hidden, 2 * intermediate)?;
            GateUp::Fused { gate_up, gate_out: intermediate }
        } else {
            GateUp::Split {
                gate: Linear::load(w, &format!("{prefix}.gate_proj"), hidden, intermediate)?,
                up: Linear::load(w, &format!("{prefix}.up_proj"), hidden, intermediate)?,
            }
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
    /// (`intermediate → hidden`).
    pub fn load(w: &dyn Weights, prefix: &str, hidden: i32, intermediate: i32) -> Result<Self> {
        Ok(GatedMlp {
            proj: GateUp::load(w, prefix, hidden, intermediate)?,
            down: Linear::load(w, &format!("{prefix}.down_proj"), intermediate, hidden)?,
        })
    }

    /// SwiGLU forward.
    pub fn forward(&self, x: &Array) -> Result<Array> {
        let (gate, up) = self.proj.forward(x)?;
        self.down.forward(&swiglu(&gate, &up)?)
    }
}
