//! Logit processing before sampling, as mlx-lm's `make_logits_processors`
//! does it and in its order: additive bias, then the repetition, presence
//! and frequency penalties over the last tokens of the context (prompt
//! included), then a constraint's mask of allowed tokens.

use anyhow::Result;
use mlx::{where_, Array, Dtype};

/// What to do to the logits before sampling; all off by default.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogitsParams {
    /// Added to the logit of each token id.
    pub bias: Vec<(u32, f32)>,
    /// Sign-aware multiplicative penalty for tokens in the window (> 0; 1 is off).
    pub repetition_penalty: Option<f32>,
    /// Subtracted once from the logit of each token in the window.
    pub presence_penalty: Option<f32>,
    /// Subtracted from a token's logit once per occurrence in the window.
    pub frequency_penalty: Option<f32>,
    /// Tokens the penalties look back over (mlx-lm's default: 20).
    pub context_size: usize,
}

impl LogitsParams {
    /// True when nothing is asked.
    pub fn is_off(&self) -> bool {
        self.bias.is_empty()
            && self.repetition_penalty.is_none()
            && self.presence_penalty.is_none()
            && self.frequency_penalty.is_none()
    }

    /// `logits` `[1, V]` after the bias and the penalties over the last
    /// `context_size` of `history`.
    pub fn apply(&self, logits: &Array, history: &[u32]) -> Result<Array> {
        let mut l = logits.astype(Dtype::F32)?;
        let v = l.dim(-1) as u32;
        if !self.bias.is_empty() {
            let ids: Vec<i32> = self.bias.iter().filter(|b| b.0 < v).map(|b| b.0 as i32).collect();
            let vals: Vec<f32> = self.bias.iter().filter(|b| b.0 < v).map(|b| b.1).collect();
            let idx = Array::from_slice(&ids, &[1, ids.len() as i32])?;
            let add = Array::from_slice(&vals, &[1, vals.len() as i32])?;
            let cur = l.take_along_axis(&idx, -1)?;
            l = l.put_along_axis(&idx, &cur.add(&add)?, -1)?;
        }
        let window: Vec<u32> = history[history.len().saturating_sub(self.context_size.max(1))..]
            .iter()
            .copied()
            .filter(|&t| t < v)
            .collect();
        if window.is_empty() {
            return Ok(l);
        }
        let idx = Array::from_slice(&window.iter().map(|&t| t as i32).collect::<Vec<_>>(), &[1, window.len() as i32])?;
        if let Some(p) = self.repetition_penalty {
            let sel = l.take_along_axis(&idx, -1)?;
            let neg = sel.lt(&Array::f32(0.0))?;
            let new = where_(&neg, &sel.mul_s(p as f64)?, &sel.div_s(p as f64)?)?;
            l = l.put_along_axis(&idx, &new, -1)?;
        }
        if let Some(p) = self.presence_penalty {
            // A repeated id writes the same value twice: subtracted once.
            let sel = l.take_along_axis(&idx, -1)?;
            l = l.put_along_axis(&idx, &sel.sub_s(p as f64)?, -1)?;
        }
        if let Some(p) = self.frequency_penalty {
            let counts: Vec<f32> =
                window.iter().map(|t| window.iter().filter(|u| *u == t).count() as f32 * p).collect();
            let sub = Array::from_slice(&counts, &[1, counts.len() as i32])?;
            let sel = l.take_along_axis(&idx, -1)?;
            l = l.put_along_axis(&idx, &sel.sub(&sub)?, -1)?;
        }
        Ok(l)
    }
}

/// `logits` `[1, V]` with the tokens `allowed` does not allow at -inf
/// (`allowed` is a bit set over the tokenizer's ids, 32 per word; ids past
/// its end are not allowed).
pub fn mask_logits(logits: &Array, allowed: &[u32]) -> Result<Array> {
    let v = logits.dim(-1) as usize;
    let add: Vec<f32> = (0..v)
        .map(|i| match allowed.get(i / 32) {
            Some(w) if w >> (i % 32) & 1 == 1 => 0.0,
            _ => f32::NEG_INFINITY,
        })
        .collect();
    Ok(logits.astype(Dtype::F32)?.add(&Array::from_slice(&add, &[1, v as i32])?)?)
}
