//! The guided decode loop: one token at a time, each step's logits
//! processed ([`LogitsParams`]), masked by a [`Constraint`] and, when asked,
//! reported with log-probabilities. It reads every token before building
//! the next step (the constraint and the penalties need it); the host's
//! mask work runs while the device computes the step's forward.

use super::params::{emit, DecodeRelease, Finish, GenParams, GenStats};
use super::plain::prompt_rollback;
use super::prefill::prefill_last_alone_until;
use super::process::mask_logits;
use crate::model::LoadedModel;
use crate::sample::sample;
use anyhow::{anyhow, Result};
use mlx::{Array, Dtype};
use plugin_api::LogitsWanted;
use std::time::Instant;

/// Which tokens may come next: a grammar matcher, seen from the loop.
pub trait Constraint {
    /// The allowed next tokens, a bit set over token ids (32 per word).
    fn allowed(&mut self) -> Result<Vec<u32>>;
    /// Advances past the token chosen.
    fn accept(&mut self, token: u32) -> Result<()>;
    /// True once the constrained text is complete and nothing may follow.
    fn is_done(&mut self) -> bool;
}

/// A token's log-probability and the most likely alternatives at its step.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    /// log p(token) under the distribution sampled from (temperature 1).
    pub logprob: f32,
    /// The `top` most likely ids and their log-probabilities, most likely first.
    pub top: Vec<(u32, f32)>,
}

/// One generated token as the guided loop reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The token id.
    pub token: u32,
    /// Its log-probability, when [`GenParams::logprobs`] asked for it.
    pub logprob: Option<TokenLogprob>,
}

/// Generates after `prompt` with `p`'s logit processing, `constraint` and
/// log-probabilities, calling `on_step` with each token (return false to stop).
pub fn generate_guided(
    m: &mut LoadedModel,
    prompt: &[u32],
    p: &GenParams,
    constraint: Option<&mut dyn Constraint>,
    on_step: impl FnMut(&Step) -> bool,
) -> Result<GenStats> {
    guided_inner(m, prompt, p, constraint, on_step).map_err(crate::memory::explain)
}

fn guided_inner(
    m: &mut LoadedModel,
    prompt: &[u32],
    p: &GenParams,
    mut constraint: Option<&mut dyn Constraint>,
    mut on_step: impl FnMut(&Step) -> bool,
) -> Result<GenStats> {
    mlx::memory::reset_peak();
    let t0 = Instant::now();
    let mut logits = prefill_last_alone_until(m, prompt, p.prefill_step, p.cancel.as_deref())?;
    let rollback = prompt_rollback(m, p);
    // The penalties look back over the prompt too, as mlx-lm's do.
    let keep = p.logits.context_size.max(1);
    let mut history: Vec<u32> = prompt[prompt.len().saturating_sub(keep)..].to_vec();
    let mut tokens = Vec::new();
    let mut t_first = None;
    let mut finish = Finish::Length;
    let mut release = DecodeRelease::default();
    for i in 0..p.max_tokens {
        if i > 0 {
            let last = *tokens.last().expect("a token was emitted");
            let y = Array::from_slice(&[last as i32], &[1, 1])?;
            let l = m.forward(&y, LogitsWanted::Last)?.ok_or_else(|| anyhow!("no logits"))?;
            let v = l.dim(-1);
            logits = l.reshape(&[1, v])?;
            mlx::async_eval(&[&logits])?;
        }
        // Host work while the device runs the forward.
        let allowed = match constraint.as_mut() {
            Some(c) => Some(c.allowed()?),
            None => None,
        };
        let mut l = if p.logits.is_off() { logits.clone() } else { p.logits.apply(&logits, &history)? };
        if let Some(a) = &allowed {
            l = mask_logits(&l, a)?;
        }
        let y = sample(&l, &p.sampler)?;
        let logprob = match p.logprobs {
            Some(k) => Some(logprob_of(&l, &y, k)?),
            None => None,
        };
        let tok = y.item_i64()? as u32;
        release.tick(tokens.len());
        crate::memory::check()?;
        if t_first.is_none() {
            t_first = Some(Instant::now());
        }
        if let Some(c) = constraint.as_mut() {
            c.accept(tok)?;
        }
        history.push(tok);
        if history.len() > 2 * keep {
            history.drain(..history.len() - keep);
        }
        let step = Step { token: tok, logprob };
        if let Some(f) = emit(&mut tokens, tok, p, &mut |_| on_step(&step)) {
            finish = f;
            break;
        }
        if constraint.as_mut().is_some_and(|c| c.is_done()) {
            finish = Finish::Stop;
            break;
        }
    }
    let t_end = Instant::now();
    let mut stats = GenStats::timed(prompt.len(), tokens, finish, [t0, t_first.unwrap_or(t_end), t_end], None);
    stats.prompt_rollback = rollback;
    Ok(stats)
}

/// The chosen token's log-probability in `logits` `[1, V]` and the `k` most likely.
fn logprob_of(logits: &Array, y: &Array, k: usize) -> Result<TokenLogprob> {
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
