//! The plain decode loop: chunked prefill, then a pipelined decode in which
//! the next step's graph is queued (`async_eval`) before the current token
//! is read, so the device never waits on the host.

use super::params::{emit, DecodeRelease, DecodeSplit, FinishReason, GenParams, GenStats};
use super::prefill::prefill_last_alone_until;
use crate::cache::Rollback;
use crate::model::{LoadedModel, Sequence};
use crate::sample::sample;
use anyhow::{anyhow, Result};
use plugin_api::{LogitsWanted, TokenSource};
use std::time::Instant;

/// After a prompt's prefill: the rollback point of `seq` that `p` asks for.
pub(crate) fn prompt_rollback(seq: &Sequence, p: &GenParams) -> Option<Rollback> {
    if p.keep_prompt_rollback {
        Rollback::take_for_any(seq.caches())
    } else {
        None
    }
}

/// Generates after `prompt` on `seq`, calling `on_token` with each id
/// (return false to stop).
pub fn generate(
    m: &mut LoadedModel,
    seq: &mut Sequence,
    prompt: &[u32],
    p: &GenParams,
    on_token: impl FnMut(u32) -> bool,
) -> Result<GenStats> {
    // MLX failing an allocation becomes the error that names the flags that help.
    generate_inner(m, seq, prompt, p, on_token).map_err(crate::memory::explain)
}

fn generate_inner(
    m: &mut LoadedModel,
    seq: &mut Sequence,
    prompt: &[u32],
    p: &GenParams,
    mut on_token: impl FnMut(u32) -> bool,
) -> Result<GenStats> {
    mlx::memory::reset_peak();
    let t0 = Instant::now();
    let logits = prefill_last_alone_until(m, seq, prompt, p.prefill_step, p.cancel.as_deref())?;
    let prompt_rollback = prompt_rollback(seq, p);
    let mut y = sample(&logits, &p.sampler)?;
    mlx::async_eval(&[&y])?;
    let mut tokens = Vec::new();
    let mut t_first = None;
    let mut finish = FinishReason::Length;
    let mut pending = false;
    let mut release = DecodeRelease::default();
    let mut split = DecodeSplit::default();
    let mut census = None;
    for i in 0..p.max_tokens {
        let t_build = Instant::now();
        // Queue the next step before reading this token, so the device never waits on the host.
        let next = if i + 1 < p.max_tokens {
            let l = m
                .forward(&mut *seq, &y.reshape(&[1, 1])?, TokenSource::Generated, LogitsWanted::Last)?
                .ok_or_else(|| anyhow!("no logits"))?;
            let v = l.dim(-1);
            let ny = sample(&l.reshape(&[1, v])?, &p.sampler)?;
            if p.census && i == 1 {
                census = Some(mlx::graph_census(&[&ny])?);
            }
            let t_launch = Instant::now();
            mlx::async_eval(&[&ny])?;
            if i > 0 {
                split.launch_s += t_launch.elapsed().as_secs_f64();
            }
            pending = true;
            Some(ny)
        } else {
            pending = false;
            None
        };
        let t_wait = Instant::now();
        let tok = y.item_i64()? as u32;
        if t_first.is_some() {
            split.build_s += t_wait.duration_since(t_build).as_secs_f64();
            split.wait_s += t_wait.elapsed().as_secs_f64();
        }
        release.tick(tokens.len());
        crate::memory::check()?;
        if t_first.is_none() {
            t_first = Some(Instant::now());
        }
        if let Some(f) = emit(&mut tokens, tok, p, &mut on_token) {
            finish = f;
            break;
        }
        match next {
            Some(n) => y = n,
            None => break,
        }
    }
    let t_end = Instant::now();
    if pending {
        // The queued step consumed one token the caller never saw: take it
        // back, once it has run (no work of this call outlives it: a process
        // exiting under it corrupts MLX's heap).
        mlx::synchronize()?;
        for c in seq.caches() {
            c.lock().trim(1);
        }
    }
    let mut stats = GenStats::timed(prompt.len(), tokens, finish, [t0, t_first.unwrap_or(t_end), t_end], None);
    stats.split = Some(split);
    stats.census = census;
    stats.prompt_rollback = prompt_rollback;
    Ok(stats)
}
