//! Dense and quantized linear layers and embeddings.

use super::Weights;
use crate::quant::{dequantize, quantized_matmul, QuantSpec, Quantized};
use crate::{Array, Error, Result};

/// `y = x Wᵀ + b`, with W dense or quantized.
#[derive(Debug, Clone)]
pub enum Linear {
    /// Dense weight `[out, in]`.
    Dense {
        /// weight
        w: Array,
        /// transposed weight `[in, out]`, kept so matmul needs no transpose node
        wt: Array,
        /// the same view as `[1, in, out]`: a `[1, L, in]` input multiplies it
        /// as one batched matmul node, where a 2-D weight makes MLX add a
        /// flatten and an unflatten around the matmul (decode is bound by
        /// host time per node)
        wt1: Array,
        /// optional bias
        b: Option<Array>,
    },
    /// Quantized weight.
    Quant {
        /// packed weight, scales and biases
        q: Quantized,
        /// its format
        spec: QuantSpec,
        /// optional bias
        b: Option<Array>,
    },
}

impl Linear {
    /// Loads `{prefix}.weight` (+ `.scales`/`.biases` when quantized, `.bias`).
    pub fn load(w: &dyn Weights, prefix: &str) -> Result<Linear> {
        let weight = w.require(&format!("{prefix}.weight"))?;
        let b = w.get(&format!("{prefix}.bias"));
        Self::from_parts(w, prefix, weight, b)
    }

    fn from_parts(w: &dyn Weights, prefix: &str, weight: Array, b: Option<Array>) -> Result<Linear> {
        match (w.get(&format!("{prefix}.scales")), w.quant(prefix)) {
            (Some(scales), Some(spec)) => Ok(Linear::Quant {
                q: Quantized { w: weight, scales, biases: w.get(&format!("{prefix}.biases")) },
                spec,
                b,
            }),
            (Some(_), None) => {
                Err(Error(format!("{prefix} has scales but the config declares no quantization for it")))
            }
            (None, _) => Ok(Linear::dense(weight, b)?),
        }
    }

    /// A dense layer from its `[out, in]` weight.
    pub fn dense(w: Array, b: Option<Array>) -> Result<Linear> {
        let wt = w.t()?;
        let wt1 = wt.expand_dims(&[0])?;
        Ok(Linear::Dense { w, wt, wt1, b })
    }

    /// Applies the layer to `x` (`[..., in]`).
    pub fn forward(&self, x: &Array) -> Result<Array> {
        let (y, b) = match self {
            Linear::Dense { wt1, b, .. } if x.ndim() == 3 && x.dim(0) == 1 => (x.matmul(wt1)?, b),
            Linear::Dense { wt, b, .. } => (x.matmul(wt)?, b),
            Linear::Quant { q, spec, b } => (quantized_matmul(x, q, spec, true)?, b),
        };
        match b {
            Some(b) => y.add(b),
            None => Ok(y),
        }
    }

    /// Output features.
    pub fn out_features(&self) -> i32 {
        match self {
            Linear::Dense { w, .. } => w.dim(0),
            Linear::Quant { q, .. } => q.w.dim(0),
        }
    }
}

/// A token embedding table, dense or quantized; doubles as the tied output
/// projection.
#[derive(Debug, Clone)]
pub struct Embedding {
    table: Linear,
}

impl Embedding {
    /// Loads `{prefix}.weight` (+ quantization).
    pub fn load(w: &dyn Weights, prefix: &str) -> Result<Embedding> {
        Ok(Embedding { table: Linear::load(w, prefix)? })
    }

    /// Looks up token ids (any shape) → `[..., dim]`.
    pub fn forward(&self, ids: &Array) -> Result<Array> {
        match &self.table {
            Linear::Dense { w, .. } => w.take(ids, 0),
            Linear::Quant { q, spec, .. } => {
                let rows = Quantized {
                    w: q.w.take(ids, 0)?,
                    scales: q.scales.take(ids, 0)?,
                    biases: q.biases.as_ref().map(|b| b.take(ids, 0)).transpose()?,
                };
                dequantize(&rows, spec, None)
            }
        }
    }

    /// `x Eᵀ`: the tied language-model head.
    pub fn as_linear(&self, x: &Array) -> Result<Array> {
        self.table.forward(x)
    }
}
