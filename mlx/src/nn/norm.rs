//! Normalisation layers.

use super::weights::{Kind, Weights};
use crate::{fast, Array, Result};

/// RMS norm with a learned scale.
#[derive(Debug, Clone)]
pub struct RmsNorm {
    /// scale
    pub weight: Array,
    /// epsilon
    pub eps: f32,
}

impl RmsNorm {
    /// Loads `{prefix}.weight`, `dim` wide.
    pub fn load(w: &dyn Weights, prefix: &str, dim: i32, eps: f32) -> Result<Self> {
        Ok(RmsNorm { weight: w.tensor(&format!("{prefix}.weight"), &[dim], Kind::Float)?, eps })
    }
    /// Applies the norm over the last axis.
    pub fn forward(&self, x: &Array) -> Result<Array> {
        fast::rms_norm(x, Some(&self.weight), self.eps)
    }
}

/// Layer norm with optional scale and bias.
#[derive(Debug, Clone)]
pub struct LayerNorm {
    /// scale
    pub weight: Option<Array>,
    /// bias
    pub bias: Option<Array>,
    /// epsilon
    pub eps: f32,
}

impl LayerNorm {
    /// Loads `{prefix}.weight` and, when `bias`, `{prefix}.bias` (each `dim`
    /// wide); both required as the flag says (a checkpoint missing one is
    /// refused naming it).
    pub fn load(w: &dyn Weights, prefix: &str, dim: i32, eps: f32, bias: bool) -> Result<Self> {
        let t = |n: &str| w.tensor(&format!("{prefix}.{n}"), &[dim], Kind::Float);
        Ok(LayerNorm { weight: Some(t("weight")?), bias: bias.then(|| t("bias")).transpose()?, eps })
    }
    /// Applies the norm over the last axis.
    pub fn forward(&self, x: &Array) -> Result<Array> {
        fast::layer_norm(x, self.weight.as_ref(), self.bias.as_ref(), self.eps)
    }
}

/// Which normalisation a model's blocks use, as its config implies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum NormKind {
    /// RMS norm with a learned scale (`{prefix}.weight`).
    Rms,
    /// RMS norm scaled by `1 + weight` (Gemma stores the scale zero-centred).
    RmsOffset,
    /// Layer norm with a learned scale, and a learned bias when `bias`.
    Layer {
        /// the norm has `{prefix}.bias`
        bias: bool,
    },
}

/// A norm of one of the [`NormKind`]s.
#[derive(Debug, Clone)]
pub enum Norm {
    /// RMS norm (the zero-centred kind has its `1 +` folded in at load).
    Rms(RmsNorm),
    /// Layer norm.
    Layer(LayerNorm),
}

impl NormKind {
    /// Loads a norm of this kind over `dim` features from `{prefix}.weight`
    /// (and `.bias`).
    pub fn load(self, w: &dyn Weights, prefix: &str, dim: i32, eps: f32) -> Result<Norm> {
        Ok(match self {
            NormKind::Rms => Norm::Rms(RmsNorm::load(w, prefix, dim, eps)?),
            NormKind::RmsOffset => {
                let n = RmsNorm::load(w, prefix, dim, eps)?;
                // `1 + w` in the weight's own type, as the reference computes
                // it per call: the same bits, once.
                Norm::Rms(RmsNorm { weight: n.weight.add_s(1.0)?, eps })
            }
            NormKind::Layer { bias } => Norm::Layer(LayerNorm::load(w, prefix, dim, eps, bias)?),
        })
    }
}

impl Norm {
    /// The element type of the norm's scale (`None`: it has none).
    pub fn dtype(&self) -> Option<crate::Dtype> {
        match self {
            Norm::Rms(n) => Some(n.weight.dtype()),
            Norm::Layer(n) => n.weight.as_ref().map(Array::dtype),
        }
    }

    /// Applies the norm over the last axis.
    pub fn forward(&self, x: &Array) -> Result<Array> {
        match self {
            Norm::Rms(n) => n.forward(x),
            Norm::Layer(n) => n.forward(x),
        }
    }
}
