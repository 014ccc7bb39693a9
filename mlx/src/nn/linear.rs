//! Dense and quantized linear layers and embeddings.

use super::weights::{Kind, Weights};
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
    /// Loads `{prefix}.weight` (+ `.scales`/`.biases` when quantized, and
    /// `.bias` when present) of a `in_features → out_features` layer; every
    /// tensor's shape and type is checked against those (and the
    /// quantization the checkpoint declares for it).
    pub fn load(w: &dyn Weights, prefix: &str, in_features: i32, out_features: i32) -> Result<Linear> {
        let (i, o) = (in_features, out_features);
        let b = match w.get(&format!("{prefix}.bias")) {
            Some(_) => Some(w.tensor(&format!("{prefix}.bias"), &[o], Kind::Float)?),
            None => None,
        };
        let q = quantized(w, prefix, &[o], i)?;
        match q {
            Some((q, spec)) => Ok(Linear::Quant { q, spec, b }),
            None => Linear::dense(w.tensor(&format!("{prefix}.weight"), &[o, i], Kind::Float)?, b),
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
            // With a bias, one addmm as MLX's nn.Linear does: in bf16 the bias
            // is added before the single rounding of the product.
            Linear::Dense { wt1, b: Some(b), .. } if x.ndim() == 3 && x.dim(0) == 1 => {
                return crate::addmm(b, x, wt1, 1.0, 1.0)
            }
            Linear::Dense { wt, b: Some(b), .. } => return crate::addmm(b, x, wt, 1.0, 1.0),
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

/// The quantized matrix `{prefix}.weight` of `lead` leading dims by `in_features`
/// columns, with its scales and (affine) biases, checked against the spec the
/// checkpoint declares; `None` when it is stored dense.
pub(crate) fn quantized(
    w: &dyn Weights,
    prefix: &str,
    lead: &[i32],
    in_features: i32,
) -> Result<Option<(Quantized, QuantSpec)>> {
    let spec = match (w.get(&format!("{prefix}.scales")), w.quant(prefix)) {
        (None, _) => return Ok(None),
        (Some(_), None) => {
            return Err(Error(format!("{prefix} has scales but the config declares no quantization for it")));
        }
        (Some(_), Some(spec)) => spec,
    };
    let (gs, bits) = (spec.group_size, spec.bits);
    if gs <= 0 || bits <= 0 || in_features % gs != 0 || (in_features * bits) % 32 != 0 {
        return Err(Error(format!(
            "{prefix}: {in_features} input features cannot be quantized with group size {gs} and {bits} bits"
        )));
    }
    let shaped = |last: i32| lead.iter().copied().chain([last]).collect::<Vec<i32>>();
    let weight = w.tensor(&format!("{prefix}.weight"), &shaped(in_features * bits / 32), Kind::Packed)?;
    let scales = w.tensor(&format!("{prefix}.scales"), &shaped(in_features / gs), Kind::Any)?;
    let biases = if spec.mode == "affine" {
        Some(w.tensor(&format!("{prefix}.biases"), &shaped(in_features / gs), Kind::Float)?)
    } else {
        None
    };
    Ok(Some((Quantized { w: weight, scales, biases }, spec)))
}

impl Embedding {
    /// Loads `{prefix}.weight` (+ quantization): `vocab` rows of `dim`.
    pub fn load(w: &dyn Weights, prefix: &str, vocab: i32, dim: i32) -> Result<Embedding> {
        Ok(Embedding { table: Linear::load(w, prefix, dim, vocab)? })
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
