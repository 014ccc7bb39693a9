//! The log-probability of a drawn token and the most likely alternatives
//! (the API's `logprobs`).

use anyhow::Result;
use mlx::{Array, Dtype};

/// A token's log-probability and the most likely alternatives at its step.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    /// log p(token) under the distribution sampled from (temperature 1).
    pub logprob: f32,
    /// The `top` most likely ids and their log-probabilities, most likely first.
    pub top: Vec<(u32, f32)>,
}

/// The chosen token's log-probability in `logits` `[1, V]` and the `k` most likely.
pub fn logprob_of(logits: &Array, y: &Array, k: usize) -> Result<TokenLogprob> {
    let l = logits.astype(Dtype::F32)?;
    let lp = l.sub(&l.logsumexp(&[-1], true)?)?;
    let chosen = lp.take_along_axis(&y.reshape(&[1, 1])?, -1)?;
    let k = k.min(lp.dim(-1) as usize);
    let top = if k > 0 {
        let idx = lp.top_k_indices(k as i32)?;
        let vals = lp.take_along_axis(&idx, -1)?;
        let ids = idx.astype(Dtype::I32)?.to_vec::<i32>()?;
        let vals = vals.to_vec::<f32>()?;
        let mut top: Vec<(u32, f32)> = ids.into_iter().map(|i| i as u32).zip(vals).collect();
        top.sort_by(|a, b| b.1.total_cmp(&a.1));
        top
    } else {
        Vec::new()
    };
    Ok(TokenLogprob { logprob: chosen.item_f32()?, top })
}
