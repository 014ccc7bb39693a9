//! Layers shared by every family: (quantized) linear and embedding, norms,
//! rotary embeddings, the gated MLP and the routed-expert (MoE) layers. Families build these from a
//! [`Weights`] view and never re-implement them.

mod linear;
mod norm;
mod rope;
mod switch;

pub use linear::{Embedding, Linear};
pub use norm::{LayerNorm, RmsNorm};
pub use rope::{Rope, RopeScaling};
pub use switch::{GluActivation, SwitchGlu, SwitchLinear};

use crate::quant::QuantSpec;
use crate::{Array, Error, Result};

/// Read access to a model's weights by name, with per-tensor quantization.
pub trait Weights {
    /// The tensor called `name`, if present.
    fn get(&self, name: &str) -> Option<Array>;
    /// How the matrix under `prefix` (e.g. `model.layers.0.mlp.up_proj`) is
    /// quantized, or `None` when it is stored dense.
    fn quant(&self, prefix: &str) -> Option<QuantSpec>;

    /// The tensor `name`, or an error naming it.
    fn require(&self, name: &str) -> Result<Array> {
        self.get(name).ok_or_else(|| Error(format!("missing weight {name}")))
    }
}

/// `silu(gate) * up`, the SwiGLU activation, compiled once (shapeless) so it
/// runs as one fused kernel instead of three (as mlx-lm does).
pub fn swiglu(gate: &Array, up: &Array) -> Result<Array> {
    // Leaked on purpose: dropping a compiled function during process exit can
    // run after MLX's own compile cache is gone.
    thread_local! {
        static FUSED: &'static Option<crate::compile::Compiled> = Box::leak(Box::new(
            crate::compile::Compiled::new(
                |a: &[Array]| Ok(vec![a[0].mul(&a[0].sigmoid()?)?.mul(&a[1])?]),
                true,
            )
            .ok(),
        ));
    }
    let fused = FUSED.with(|f| f.as_ref().map(|c| c.call(&[gate, up])));
    match fused {
        Some(Ok(mut v)) if v.len() == 1 => Ok(v.remove(0)),
        _ => gate.mul(&gate.sigmoid()?)?.mul(up),
    }
}

/// `x * sigmoid(x)`.
pub fn silu(x: &Array) -> Result<Array> {
    x.mul(&x.sigmoid()?)
}

/// The tanh approximation of GELU (`gelu_pytorch_tanh`).
pub fn gelu_approx(x: &Array) -> Result<Array> {
    // 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))
    let c = (2.0f64 / std::f64::consts::PI).sqrt();
    let inner = x.add(&x.pow_s(3.0)?.mul_s(0.044715)?)?.mul_s(c)?;
    x.mul_s(0.5)?.mul(&inner.tanh()?.add_s(1.0)?)
}

/// The gated MLP of Llama-style models: `down(act(gate(x)) * up(x))`.
#[derive(Debug, Clone)]
pub struct GatedMlp {
    /// gate projection
    pub gate: Linear,
    /// up projection
    pub up: Linear,
    /// down projection
    pub down: Linear,
    /// gate and up stacked into one matrix: one matmul instead of two
    pub gate_up: Option<Linear>,
}

impl GatedMlp {
    /// Loads `{prefix}.gate_proj`, `up_proj`, `down_proj`.
    pub fn load(w: &dyn Weights, prefix: &str) -> Result<Self> {
        let gate = Linear::load(w, &format!("{prefix}.gate_proj"))?;
        let up = Linear::load(w, &format!("{prefix}.up_proj"))?;
        let gate_up = Linear::concat(&[&gate, &up])?;
        Ok(GatedMlp { gate, up, down: Linear::load(w, &format!("{prefix}.down_proj"))?, gate_up })
    }

    /// SwiGLU forward.
    pub fn forward(&self, x: &Array) -> Result<Array> {
        let h = match &self.gate_up {
            Some(gu) => {
                let y = gu.forward(x)?;
                let n = self.gate.out_features();
                let parts = y.split_at(&[n], -1)?;
                swiglu(&parts[0], &parts[1])?
            }
            None => swiglu(&self.gate.forward(x)?, &self.up.forward(x)?)?,
        };
        self.down.forward(&h)
    }
}
