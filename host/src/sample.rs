//! Token sampling on the device: greedy, temperature, top-p, top-k, min-p.

use mlx::{random, where_, Array, Dtype, Result};

/// Sampler settings (mlx-lm's names and meanings).
#[derive(Debug, Clone, PartialEq)]
pub struct SamplerParams {
    /// 0 means greedy.
    pub temperature: f32,
    /// Nucleus mass (1.0: off).
    pub top_p: f32,
    /// Keep the k most likely (0: off).
    pub top_k: i32,
    /// Drop tokens below min_p × p(max) (0: off).
    pub min_p: f32,
}

impl Default for SamplerParams {
    fn default() -> Self {
        SamplerParams { temperature: 0.0, top_p: 1.0, top_k: 0, min_p: 0.0 }
    }
}

/// Samples the next token from `[B, V]` logits, returning `[B]` int32 ids.
pub fn sample(logits: &Array, p: &SamplerParams) -> Result<Array> {
    sample_keyed(logits, p, None)
}

/// [`sample`] drawing with `key` (a sequence's own random stream) instead
/// of the global one.
pub fn sample_keyed(logits: &Array, p: &SamplerParams, key: Option<&Array>) -> Result<Array> {
    if p.temperature <= 0.0 {
        return logits.argmax(-1, false)?.astype(Dtype::I32);
    }
    random::categorical(&filtered_logprobs(logits, p)?.mul_s(inverse_temperature(p))?, -1, key)?.astype(Dtype::I32)
}

/// The largest `1 / temperature` applied. Past it a float32 scaling
/// overflows (1 / 1e-40 is infinite), every log-probability becomes -inf
/// and the draw is noise; at it, log-probabilities (≥ -ln(vocab), so ≥ -30)
/// stay finite and the draw is already the argmax, as a temperature that
/// small asks for.
const MAX_INVERSE_TEMPERATURE: f64 = 1e30;

/// `1 / temperature`, bounded so the scaled log-probabilities stay finite.
fn inverse_temperature(p: &SamplerParams) -> f64 {
    (1.0 / p.temperature as f64).min(MAX_INVERSE_TEMPERATURE)
}

/// The distribution [`sample`] draws from when `temperature > 0`, as
/// probabilities over the last axis (speculative decoding's rejection test
/// needs it for both the target and the drafter).
pub fn probs(logits: &Array, p: &SamplerParams) -> Result<Array> {
    filtered_logprobs(logits, p)?.mul_s(inverse_temperature(p))?.softmax(&[-1], true)
}

/// Log-probabilities at temperature 1 with the top-p, min-p and top-k
/// filters applied (dropped tokens at -inf).
fn filtered_logprobs(logits: &Array, p: &SamplerParams) -> Result<Array> {
    let logits = logits.astype(Dtype::F32)?;
    let mut logprobs = logits.sub(&logits.logsumexp(&[-1], true)?)?;
    let neg_inf = Array::f32(f32::NEG_INFINITY);
    if p.top_p > 0.0 && p.top_p < 1.0 {
        // Keep the smallest set whose mass reaches top_p: sort ascending,
        // drop tokens whose cumulative mass from the bottom is ≤ 1 - top_p.
        let probs = logprobs.exp()?;
        let order = logprobs.argsort(-1)?;
        let sorted = probs.take_along_axis(&order, -1)?;
        let cum = sorted.cumsum(-1, false, true)?;
        let keep_sorted = cum.gt(&Array::f32(1.0 - p.top_p))?;
        let keep = mlx::zeros(logprobs.shape(), Dtype::Bool)?.put_along_axis(&order, &keep_sorted, -1)?;
        logprobs = where_(&keep, &logprobs, &neg_inf)?;
    }
    if p.min_p > 0.0 {
        let top = logprobs.max(&[-1], true)?;
        let thresh = top.add(&Array::f32(p.min_p.ln()))?;
        logprobs = where_(&logprobs.lt(&thresh)?, &neg_inf, &logprobs)?;
    }
    if p.top_k > 0 && p.top_k < logprobs.dim(-1) {
        let kth = logprobs.neg()?.argpartition(p.top_k - 1, -1)?;
        let v = logprobs.dim(-1);
        let drop_idx = kth.slice_axis(-1, p.top_k, v)?;
        let mask_vals = mlx::full(drop_idx.shape(), &neg_inf, Dtype::F32)?;
        logprobs = logprobs.put_along_axis(&drop_idx, &mask_vals, -1)?;
    }
    Ok(logprobs)
}
