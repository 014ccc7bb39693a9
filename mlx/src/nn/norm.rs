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
    /// Loads `{prefix}.weight` and `{prefix}.bias` (each `dim` wide) when present.
    pub fn load(w: &dyn Weights, prefix: &str, dim: i32, eps: f32) -> Result<Self> {
        let opt = |n: &str| {
            let name = format!("{prefix}.{n}");
            w.get(&name).map(|_| w.tensor(&name, &[dim], Kind::Float)).transpose()
        };
        Ok(LayerNorm { weight: opt("weight")?, bias: opt("bias")?, eps })
    }
    /// Applies the norm over the last axis.
    pub fn forward(&self, x: &Array) -> Result<Array> {
        fast::layer_norm(x, self.weight.as_ref(), self.bias.as_ref(), self.eps)
    }
}
