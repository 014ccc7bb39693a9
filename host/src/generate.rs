//! The generation loop: chunked prefill, then a pipelined decode in which the
//! next step's graph is queued (async_eval) before the current token is read.

use crate::cache::Checkpoint;
use crate::model::LoadedModel;
use crate::sample::{sample, SamplerParams};
use anyhow::{anyhow, bail, Result};
use mlx::{Array, Dtype};
use plugin_api::LogitsWanted;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Generation settings.
#[derive(Debug, Clone)]
pub struct GenParams {
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// Sampling.
    pub sampler: SamplerParams,
    /// Prompt tokens per prefill chunk.
    pub prefill_step: usize,
    /// Token ids that end generation (not emitted... but reported).
    pub stop_ids: Vec<u32>,
    /// Keep a [`Checkpoint`] of the caches right after the prompt is
    /// prefilled (in [`LoadedModel::prompt_checkpoint`]), for a conversation
    /// whose next turn cannot rewind by trimming.
    pub checkpoint_prompt: bool,
    /// Record the primitives of one steady decode step's graph in
    /// [`GenStats::census`] (a diagnostic: what MLX schedules per token).
    pub census: bool,
    /// Set (e.g. by Ctrl-C) to stop: checked between prefill chunks, which
    /// then fail with [`Interrupted`], and before each token is emitted.
    pub cancel: Option<Arc<AtomicBool>>,
}

/// The error of a generation stopped through [`GenParams::cancel`] before
/// its first token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interrupted;

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("interrupted")
    }
}

impl std::error::Error for Interrupted {}

/// Fails with [`Interrupted`] once `cancel` is set.
fn check_cancel(cancel: Option<&AtomicBool>) -> Result<()> {
    match cancel {
        Some(c) if c.load(Ordering::SeqCst) => Err(Interrupted.into()),
        _ => Ok(()),
    }
}

impl Default for GenParams {
    fn default() -> Self {
        GenParams {
            max_tokens: 256,
            sampler: SamplerParams::default(),
            prefill_step: 2048,
            stop_ids: Vec::new(),
            checkpoint_prompt: false,
            census: false,
            cancel: None,
        }
    }
}

/// After a prompt's prefill: keeps the checkpoint `p` asks for.
pub(crate) fn checkpoint_prompt(m: &mut LoadedModel, p: &GenParams) {
    m.prompt_checkpoint = if p.checkpoint_prompt { Checkpoint::take_for_any(&m.caches) } else { None };
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// A stop token was produced.
    Stop,
    /// `max_tokens` reached.
    Length,
    /// The callback asked to stop.
    Cancelled,
}

/// What a generation produced and how fast.
#[derive(Debug, Clone)]
pub struct GenStats {
    /// Prompt length.
    pub prompt_tokens: usize,
    /// Generated ids (including a final stop token, if any).
    pub tokens: Vec<u32>,
    /// Prompt tokens / time to first token.
    pub prompt_tps: f64,
    /// Tokens after the first / time after the first.
    pub generation_tps: f64,
    /// Peak MLX memory during the call.
    pub peak_memory_bytes: usize,
    /// Why it ended.
    pub finish: Finish,
    /// Drafting counts, when a drafter ran.
    pub draft: Option<crate::speculative::DraftStats>,
    /// Where the plain decode loop's time went (absent for speculative runs).
    pub split: Option<DecodeSplit>,
    /// Primitives of the second decode step's graph, most frequent first
    /// (when [`GenParams::census`] asked for them).
    pub census: Option<Vec<(String, usize)>>,
}

/// The plain decode loop's time after the first token, in two parts: the
/// host building and queueing each step's graph, and the host blocked
/// reading a token the device has not finished. Wait ≫ build means the
/// device (kernels) bounds decode; build close to the step time means the
/// host does.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DecodeSplit {
    /// Seconds spent in forward + sample + `async_eval`.
    pub build_s: f64,
    /// The part of `build_s` spent inside `async_eval` (MLX scheduling and
    /// encoding the graph); the rest is building it.
    pub launch_s: f64,
    /// Seconds spent in `item` waiting for the device.
    pub wait_s: f64,
}

/// `[1, n]` int32 token ids.
pub(crate) fn ids_array(ids: &[u32]) -> Result<Array> {
    let v: Vec<i32> = ids.iter().map(|&i| i as i32).collect();
    Array::from_slice(&v, &[1, v.len() as i32]).map_err(Into::into)
}

/// Refuses token ids outside the model's vocabulary: MLX's embedding
/// gather does no bounds check and would read whatever memory follows.
pub(crate) fn check_ids(m: &LoadedModel, ids: &[u32]) -> Result<()> {
    let v = m.plan.vocab_size;
    match ids.iter().find(|&&i| i >= v) {
        Some(bad) => bail!("token id {bad} is outside the vocabulary of {v} tokens"),
        None => Ok(()),
    }
}

/// Empties MLX's buffer cache, as mlx-lm does after each prefill chunk and
/// every [`DecodeRelease::EVERY`] decoded tokens: prefill-sized buffers would
/// otherwise be reused for smaller decode arrays (MLX hands out cached
/// buffers up to twice the size asked for), holding memory the run no
/// longer needs.
pub(crate) fn release_buffers() {
    mlx::memory::clear_cache();
}

/// When a decode loop calls [`release_buffers`]: at the first token, then
/// each time another [`DecodeRelease::EVERY`] tokens have been emitted
/// (the speculative loop emits several per round, so it counts, not
/// divides).
#[derive(Debug, Default)]
pub(crate) struct DecodeRelease {
    next: usize,
}

impl DecodeRelease {
    /// Tokens between two releases (mlx-lm's figure).
    pub(crate) const EVERY: usize = 256;

    /// Called with the number of tokens emitted so far.
    pub(crate) fn tick(&mut self, emitted: usize) {
        if emitted >= self.next {
            release_buffers();
            self.next = emitted + Self::EVERY;
        }
    }
}

/// Feeds `prompt` through the model in chunks; returns the last position's
/// logits `[1, V]`.
pub fn prefill(m: &mut LoadedModel, prompt: &[u32], step: usize) -> Result<Array> {
    if prompt.is_empty() {
        bail!("the prompt is empty: nothing to generate from");
    }
    check_ids(m, prompt)?;
    let step = step.max(1);
    let mut rest = prompt;
    while rest.len() > step {
        m.forward(&ids_array(&rest[..step])?, LogitsWanted::None)?;
        m.eval_caches()?;
        release_buffers();
        rest = &rest[step..];
    }
    let logits =
        m.forward(&ids_array(rest)?, LogitsWanted::Last)?.ok_or_else(|| anyhow!("the model returned no logits"))?;
    let v = logits.dim(-1);
    logits.reshape(&[1, v]).map_err(Into::into)
}

/// Feeds `prompt` as mlx-lm's `generate_step` does: all but the last token
/// in chunks of `step` (evaluating the caches after each), then the last
/// token alone; returns its logits `[1, V]`. The chunk boundaries decide
/// when a quantized cache starts quantizing and what a rotating window
/// holds, so this split gives mlx-lm's tokens with those caches.
pub fn prefill_last_alone(m: &mut LoadedModel, prompt: &[u32], step: usize) -> Result<Array> {
    prefill_last_alone_until(m, prompt, step, None)
}

/// [`prefill_last_alone`], stopping with [`Interrupted`] between chunks once
/// `cancel` is set.
pub(crate) fn prefill_last_alone_until(
    m: &mut LoadedModel,
    prompt: &[u32],
    step: usize,
    cancel: Option<&AtomicBool>,
) -> Result<Array> {
    let mut out = None;
    prefill_chunks(m, prompt, step, false, cancel, |_, _, _, last| {
        out = last;
        Ok(())
    })?;
    out.ok_or_else(|| anyhow!("the model returned no logits"))
}

/// [`prefill_last_alone`]'s forwards, calling `f(model, chunk, hidden,
/// logits)` after each: the hidden state `[1, L, H]` when `want_hidden`,
/// the logits `[1, V]` for the final (one-token) chunk only.
pub(crate) fn prefill_chunks(
    m: &mut LoadedModel,
    prompt: &[u32],
    step: usize,
    want_hidden: bool,
    cancel: Option<&AtomicBool>,
    mut f: impl FnMut(&mut LoadedModel, &[u32], Option<Array>, Option<Array>) -> Result<()>,
) -> Result<()> {
    let Some((_, head)) = prompt.split_last() else {
        bail!("the prompt is empty: nothing to generate from");
    };
    check_ids(m, prompt)?;
    for chunk in head.chunks(step.max(1)) {
        check_cancel(cancel)?;
        let (_, h) = m.forward_io(&ids_array(chunk)?, LogitsWanted::None, want_hidden)?;
        m.eval_caches()?;
        release_buffers();
        crate::memory::check()?;
        f(m, chunk, h, None)?;
    }
    check_cancel(cancel)?;
    let last = &prompt[head.len()..];
    let (logits, h) = m.forward_io(&ids_array(last)?, LogitsWanted::Last, want_hidden)?;
    let logits = logits.ok_or_else(|| anyhow!("the model returned no logits"))?;
    let v = logits.dim(-1);
    f(m, last, h, Some(logits.reshape(&[1, v])?))
}

/// Generates after `prompt`, calling `on_token` with each id (return false to stop).
pub fn generate(
    m: &mut LoadedModel,
    prompt: &[u32],
    p: &GenParams,
    on_token: impl FnMut(u32) -> bool,
) -> Result<GenStats> {
    // MLX failing an allocation becomes the error that names the flags that help.
    let r = match m.drafter.take() {
        Some(mut d) => {
            let spec = m.spec.clone();
            let r = crate::speculative::generate_speculative(m, &mut d, prompt, p, &spec, on_token);
            m.drafter = Some(d);
            r
        }
        None => generate_inner(m, prompt, p, on_token),
    };
    r.map_err(crate::memory::explain)
}

fn generate_inner(
    m: &mut LoadedModel,
    prompt: &[u32],
    p: &GenParams,
    mut on_token: impl FnMut(u32) -> bool,
) -> Result<GenStats> {
    mlx::memory::reset_peak();
    let t0 = Instant::now();
    let logits = prefill_last_alone_until(m, prompt, p.prefill_step, p.cancel.as_deref())?;
    checkpoint_prompt(m, p);
    let mut y = sample(&logits, &p.sampler)?;
    mlx::async_eval(&[&y])?;
    let mut tokens = Vec::new();
    let mut t_first = None;
    let mut finish = Finish::Length;
    let mut pending = false;
    let mut release = DecodeRelease::default();
    let mut split = DecodeSplit::default();
    let mut census = None;
    for i in 0..p.max_tokens {
        let t_build = Instant::now();
        // Queue the next step before reading this token, so the device never waits on the host.
        let next = if i + 1 < p.max_tokens {
            let l = m.forward(&y.reshape(&[1, 1])?, LogitsWanted::Last)?.ok_or_else(|| anyhow!("no logits"))?;
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
        for c in &m.caches {
            c.lock().trim(1);
        }
    }
    let mut stats = GenStats::timed(prompt.len(), tokens, finish, [t0, t_first.unwrap_or(t_end), t_end], None);
    stats.split = Some(split);
    stats.census = census;
    Ok(stats)
}

impl GenStats {
    /// Stats from the generated tokens and the start, first-token and end
    /// instants (mlx_lm.benchmark's definitions; peak memory read now).
    pub(crate) fn timed(
        prompt_tokens: usize,
        tokens: Vec<u32>,
        finish: Finish,
        [t0, t_first, t_end]: [Instant; 3],
        draft: Option<crate::speculative::DraftStats>,
    ) -> GenStats {
        let first = t_first.duration_since(t0).as_secs_f64();
        let rest = t_end.duration_since(t_first).as_secs_f64();
        GenStats {
            prompt_tokens,
            prompt_tps: if first > 0.0 { prompt_tokens as f64 / first } else { 0.0 },
            generation_tps: if rest > 0.0 && tokens.len() > 1 { (tokens.len() - 1) as f64 / rest } else { 0.0 },
            peak_memory_bytes: mlx::memory::peak(),
            tokens,
            finish,
            draft,
            split: None,
            census: None,
        }
    }
}

/// Records a generated token and tells whether generation ends with it: a
/// stop token (kept in the output, not passed on) or the callback saying no.
pub(crate) fn emit(
    tokens: &mut Vec<u32>,
    tok: u32,
    p: &GenParams,
    on_token: &mut impl FnMut(u32) -> bool,
) -> Option<Finish> {
    tokens.push(tok);
    if p.stop_ids.contains(&tok) {
        Some(Finish::Stop)
    } else if p.cancel.as_ref().is_some_and(|c| c.load(Ordering::SeqCst)) || !on_token(tok) {
        Some(Finish::Cancelled)
    } else {
        None
    }
}

/// The dtype used for token id inputs.
pub const TOKEN_DTYPE: Dtype = Dtype::I32;
