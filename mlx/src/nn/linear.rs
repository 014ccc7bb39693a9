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
        Ok(Linear::Dense { w, wt, b })
    }

    /// Applies the layer to `x` (`[..., in]`).
    pub fn forward(&self, x: &Array) -> Result<Array> {
        let (y, b) = match self {
            Linear::Dense { wt, b, .. } => (x.matmul(wt)?, b),
            Linear::Quant { q, spec, b } => (quantized_matmul(x, q, spec, true)?, b),
        };
        match b {
            Some(b) => y.add(b),
            None => Ok(y),
        }
    }

    /// Stacks layers with the same input and storage into one whose output
    /// is their outputs side by side (one matmul instead of several).
    /// `None` when they cannot be stacked (mixed storage or biases).
    pub fn concat(parts: &[&Linear]) -> Result<Option<Linear>> {
        // Off unless FAMLX_STACK=1: the stacked copy sits beside the originals the
        // host keeps for hot reload (1.5x weight memory), and on the H200 it did
        // not pay for itself (Llama-3.2-1B bf16 decode 465 tok/s stacked vs 624
        // unstacked, same run).
        if !std::env::var("FAMLX_STACK").is_ok_and(|v| v == "1") {
            return Ok(None);
        }
        let cat = |v: Vec<&Array>| crate::concatenate(&v, 0);
        let biases: Vec<Option<&Array>> = parts.iter().map(|p| p.bias()).collect();
        let b = if biases.iter().all(Option::is_none) {
            None
        } else if let Some(bs) = biases.iter().copied().collect::<Option<Vec<_>>>() {
            Some(crate::concatenate(&bs, 0)?)
        } else {
            return Ok(None);
        };
        if let Some(ws) = parts
            .iter()
            .map(|p| match p {
                Linear::Dense { w, .. } => Some(w),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()
        {
            if ws.iter().any(|w| w.dtype() != ws[0].dtype()) {
                return Ok(None);
            }
            return Ok(Some(Linear::dense(cat(ws)?, b)?));
        }
        let qs: Option<Vec<(&Quantized, &QuantSpec)>> = parts
            .iter()
            .map(|p| match p {
                Linear::Quant { q, spec, .. } => Some((q, spec)),
                _ => None,
            })
            .collect();
        let Some(qs) = qs else { return Ok(None) };
        let spec = qs[0].1;
        if qs.iter().any(|(q, s)| *s != spec || q.biases.is_some() != qs[0].0.biases.is_some()) {
            return Ok(None);
        }
        let biases = match qs[0].0.biases {
            Some(_) => Some(cat(qs.iter().map(|(q, _)| q.biases.as_ref().expect("checked")).collect())?),
            None => None,
        };
        Ok(Some(Linear::Quant {
            q: Quantized {
                w: cat(qs.iter().map(|(q, _)| &q.w).collect())?,
                scales: cat(qs.iter().map(|(q, _)| &q.scales).collect())?,
                biases,
            },
            spec: spec.clone(),
            b,
        }))
    }

    fn bias(&self) -> Option<&Array> {
        match self {
            Linear::Dense { b, .. } | Linear::Quant { b, .. } => b.as_ref(),
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
