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
        /// the product is a share of the whole, summed over the
        /// tensor-parallel group before the bias (see [`Split::Cols`])
        sum: bool,
    },
    /// Quantized weight.
    Quant {
        /// packed weight, scales and biases
        q: Quantized,
        /// its format
        spec: QuantSpec,
        /// optional bias
        b: Option<Array>,
        /// summed over the tensor-parallel group (see [`Split::Cols`])
        sum: bool,
    },
}

/// Which part of a linear layer one rank of a tensor-parallel split holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Split {
    /// The whole layer.
    Whole,
    /// These ranges of output features, side by side in order
    /// ("all-to-sharded"; several ranges for a fused projection whose
    /// parts each split).
    Rows(Vec<(i32, i32)>),
    /// These input features; each rank's product is summed over the group
    /// before the bias ("sharded-to-all").
    Cols(i32, i32),
}

impl Linear {
    /// Loads `{prefix}.weight` (+ `.scales`/`.biases` when quantized) of a
    /// `in_features → out_features` layer without a bias; every tensor's
    /// shape and type is checked against those (and the quantization the
    /// checkpoint declares for it). A `{prefix}.bias` in the checkpoint is
    /// not read (the host reports it as unexpected): a layer's bias is part
    /// of its config, never guessed from the file (see [`Linear::load_with_bias`]).
    pub fn load(w: &dyn Weights, prefix: &str, in_features: i32, out_features: i32) -> Result<Linear> {
        Self::load_with_bias(w, prefix, in_features, out_features, false)
    }

    /// [`Linear::load`], with `{prefix}.bias` (`[out_features]`) required
    /// when `bias`: a checkpoint missing it is refused naming it.
    pub fn load_with_bias(
        w: &dyn Weights,
        prefix: &str,
        in_features: i32,
        out_features: i32,
        bias: bool,
    ) -> Result<Linear> {
        let (i, o) = (in_features, out_features);
        let b = bias.then(|| w.tensor(&format!("{prefix}.bias"), &[o], Kind::Float)).transpose()?;
        let q = quantized(w, prefix, &[o], i)?;
        match q {
            Some((q, spec)) => Ok(Linear::Quant { q, spec, b, sum: false }),
            None => Linear::dense(w.tensor(&format!("{prefix}.weight"), &[o, i], Kind::Float)?, b),
        }
    }

    /// [`Linear::load_with_bias`] of this rank's part `split` of the layer.
    /// Every tensor is checked whole first, then only the part is read. A
    /// quantized layer splits its inputs only on its quantization groups.
    pub fn load_split(
        w: &dyn Weights,
        prefix: &str,
        in_features: i32,
        out_features: i32,
        bias: bool,
        split: &Split,
    ) -> Result<Linear> {
        let whole = Linear::load_with_bias(w, prefix, in_features, out_features, bias)?;
        let part = |suffix: &str, axis: i32, ranges: &[(i32, i32)]| w.runs(&format!("{prefix}.{suffix}"), axis, ranges);
        match (split, &whole) {
            (Split::Whole, _) => Ok(whole),
            (Split::Rows(r), Linear::Dense { b, .. }) => {
                Linear::dense(part("weight", 0, r)?, b.as_ref().map(|_| part("bias", 0, r)).transpose()?)
            }
            (Split::Rows(r), Linear::Quant { q, spec, b, .. }) => Ok(Linear::Quant {
                q: Quantized {
                    w: part("weight", 0, r)?,
                    scales: part("scales", 0, r)?,
                    biases: q.biases.as_ref().map(|_| part("biases", 0, r)).transpose()?,
                },
                spec: spec.clone(),
                b: b.as_ref().map(|_| part("bias", 0, r)).transpose()?,
                sum: false,
            }),
            (&Split::Cols(a, c), Linear::Dense { b, .. }) => {
                let w = part("weight", 1, &[(a, c)])?;
                let (wt, wt1) = (w.t()?, w.t()?.expand_dims(&[0])?);
                Ok(Linear::Dense { w, wt, wt1, b: b.clone(), sum: true })
            }
            (&Split::Cols(a, c), Linear::Quant { q, spec, b, .. }) => {
                let (words, groups) = quantized_inputs(prefix, spec, a, c)?;
                let groups = [groups];
                Ok(Linear::Quant {
                    q: Quantized {
                        w: part("weight", 1, &[words])?,
                        scales: part("scales", 1, &groups)?,
                        biases: q.biases.as_ref().map(|_| part("biases", 1, &groups)).transpose()?,
                    },
                    spec: spec.clone(),
                    b: b.clone(),
                    sum: true,
                })
            }
        }
    }

    /// One layer whose output is `parts`' outputs side by side (a fused
    /// projection built from split ones), or `None` when they cannot stack
    /// (mixed kinds or quantization, or summed shares).
    pub fn stack(parts: &[&Linear]) -> Result<Option<Linear>> {
        let cat = |v: Vec<&Array>| crate::concatenate(&v, 0);
        let biases = |v: Vec<&Option<Array>>| -> Result<Option<Option<Array>>> {
            if v.iter().all(|b| b.is_none()) {
                return Ok(Some(None));
            }
            if v.iter().any(|b| b.is_none()) {
                return Ok(None);
            }
            Ok(Some(Some(cat(v.into_iter().map(|b| b.as_ref().expect("all some")).collect())?)))
        };
        if parts.iter().all(|p| matches!(p, Linear::Dense { sum: false, .. })) {
            let mut ws = Vec::new();
            let mut bs = Vec::new();
            for p in parts {
                if let Linear::Dense { w, b, .. } = p {
                    ws.push(w);
                    bs.push(b);
                }
            }
            let Some(b) = biases(bs)? else { return Ok(None) };
            return Ok(Some(Linear::dense(cat(ws)?, b)?));
        }
        let Some(Linear::Quant { spec: first, q: q0, .. }) = parts.first() else { return Ok(None) };
        let mut qs = Vec::new();
        let mut bs = Vec::new();
        for p in parts {
            match p {
                Linear::Quant { q, spec, b, sum: false }
                    if spec == first && q.biases.is_some() == q0.biases.is_some() =>
                {
                    qs.push(q);
                    bs.push(b);
                }
                _ => return Ok(None),
            }
        }
        let Some(b) = biases(bs)? else { return Ok(None) };
        let q = Quantized {
            w: cat(qs.iter().map(|q| &q.w).collect())?,
            scales: cat(qs.iter().map(|q| &q.scales).collect())?,
            biases: q0
                .biases
                .as_ref()
                .map(|_| cat(qs.iter().map(|q| q.biases.as_ref().expect("all some")).collect()))
                .transpose()?,
        };
        Ok(Some(Linear::Quant { q, spec: first.clone(), b, sum: false }))
    }

    /// A dense layer from its `[out, in]` weight.
    pub fn dense(w: Array, b: Option<Array>) -> Result<Linear> {
        let wt = w.t()?;
        let wt1 = wt.expand_dims(&[0])?;
        Ok(Linear::Dense { w, wt, wt1, b, sum: false })
    }

    /// Applies the layer to `x` (`[..., in]`).
    pub fn forward(&self, x: &Array) -> Result<Array> {
        let (y, b) = match self {
            // A share of a split layer: summed over the group, then the bias once.
            Linear::Dense { wt1, b, sum: true, .. } if x.ndim() == 3 && x.dim(0) == 1 => {
                (sum_shares(&x.matmul(wt1)?)?, b)
            }
            Linear::Dense { wt, b, sum: true, .. } => (sum_shares(&x.matmul(wt)?)?, b),
            Linear::Quant { q, spec, b, sum: true } => (sum_shares(&quantized_matmul(x, q, spec, true)?)?, b),
            // With a bias, one addmm as MLX's nn.Linear does: in bf16 the bias
            // is added before the single rounding of the product.
            Linear::Dense { wt1, b: Some(b), .. } if x.ndim() == 3 && x.dim(0) == 1 => {
                return crate::addmm(b, x, wt1, 1.0, 1.0)
            }
            Linear::Dense { wt, b: Some(b), .. } => return crate::addmm(b, x, wt, 1.0, 1.0),
            Linear::Dense { wt1, b, .. } if x.ndim() == 3 && x.dim(0) == 1 => (x.matmul(wt1)?, b),
            Linear::Dense { wt, b, .. } => (x.matmul(wt)?, b),
            Linear::Quant { q, spec, b, .. } => (quantized_matmul(x, q, spec, true)?, b),
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

/// Where input features `[a, b)` of a quantized matrix lie: its packed
/// words and its groups (scales, biases). An error naming `prefix` unless
/// both ends fall on whole groups.
pub(crate) fn quantized_inputs(prefix: &str, spec: &QuantSpec, a: i32, b: i32) -> Result<((i32, i32), (i32, i32))> {
    let (gs, bits) = (spec.group_size, spec.bits);
    if gs <= 0 || a % gs != 0 || b % gs != 0 || (a * bits) % 32 != 0 || (b * bits) % 32 != 0 {
        return Err(Error::msg(format!(
            "{prefix}: cannot split its inputs at {a}..{b}: not on its quantization groups of {gs}"
        )));
    }
    Ok(((a * bits / 32, b * bits / 32), (a / gs, b / gs)))
}

/// The sum over the tensor-parallel group of each rank's share `y` of a
/// product. Half-precision shares are summed in f32 and rounded once, as
/// one process's matmul rounds its f32 accumulator once: summing them in
/// half precision would round every partial sum.
pub(crate) fn sum_shares(y: &Array) -> Result<Array> {
    let dt = y.dtype();
    if matches!(dt, crate::Dtype::BF16 | crate::Dtype::F16) {
        crate::distributed::all_sum(&y.astype(crate::Dtype::F32)?)?.astype(dt)
    } else {
        crate::distributed::all_sum(y)
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
            return Err(Error::msg(format!("{prefix} has scales but the config declares no quantization for it")));
        }
        (Some(_), Some(spec)) => spec,
    };
    let (gs, bits) = (spec.group_size, spec.bits);
    if gs <= 0 || bits <= 0 || in_features % gs != 0 || (in_features * bits) % 32 != 0 {
        return Err(Error::msg(format!(
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

    /// The width of its rows.
    pub fn width(&self) -> i32 {
        match &self.table {
            Linear::Dense { w, .. } => w.dim(-1),
            Linear::Quant { q, spec, .. } => q.w.dim(-1) * 32 / spec.bits,
        }
    }

    /// The type of the rows it looks up.
    pub fn dtype(&self) -> crate::Dtype {
        match &self.table {
            Linear::Dense { w, .. } => w.dtype(),
            Linear::Quant { q, .. } => q.scales.dtype(),
        }
    }

    /// `x Eᵀ`: the tied language-model head.
    pub fn as_linear(&self, x: &Array) -> Result<Array> {
        self.table.forward(x)
    }
}
