//! Feeding a prompt through the model: chunked prefill (mlx-lm's split, so
//! quantized and rotating caches hold what mlx-lm's hold), with the checks
//! every prompt gets (ids inside the vocabulary, cancel between chunks).

use super::params::{check_cancel, release_buffers};
use crate::model::{LoadedModel, Sequence};
use anyhow::{anyhow, bail, Result};
use mlx::Array;
use plugin_api::{LogitsWanted, TokenSource};
use std::sync::atomic::AtomicBool;

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

/// Feeds `prompt` through the model into `seq` in chunks; returns the last
/// position's logits `[1, V]`.
pub fn prefill(m: &mut LoadedModel, seq: &mut Sequence, prompt: &[u32], step: usize) -> Result<Array> {
    if prompt.is_empty() {
        bail!("the prompt is empty: nothing to generate from");
    }
    check_ids(m, prompt)?;
    let step = step.max(1);
    let mut rest = prompt;
    while rest.len() > step {
        m.forward(&mut *seq, &ids_array(&rest[..step])?, TokenSource::Prompt, LogitsWanted::None)?;
        seq.eval_caches()?;
        release_buffers();
        rest = &rest[step..];
    }
    let logits = m
        .forward(seq, &ids_array(rest)?, TokenSource::Prompt, LogitsWanted::Last)?
        .ok_or_else(|| anyhow!("the model returned no logits"))?;
    let v = logits.dim(-1);
    logits.reshape(&[1, v]).map_err(Into::into)
}

/// Feeds `prompt` into `seq` as mlx-lm's `generate_step` does: all but the last token
/// in chunks of `step` (evaluating the caches after each), then the last
/// token alone; returns its logits `[1, V]`. The chunk boundaries decide
/// when a quantized cache starts quantizing and what a rotating window
/// holds, so this split gives mlx-lm's tokens with those caches.
pub fn prefill_last_alone(m: &mut LoadedModel, seq: &mut Sequence, prompt: &[u32], step: usize) -> Result<Array> {
    prefill_last_alone_until(m, seq, prompt, step, None)
}

/// [`prefill_last_alone`], stopping with [`Interrupted`] between chunks once
/// `cancel` is set.
pub(crate) fn prefill_last_alone_until(
    m: &mut LoadedModel,
    seq: &mut Sequence,
    prompt: &[u32],
    step: usize,
    cancel: Option<&AtomicBool>,
) -> Result<Array> {
    let mut out = None;
    prefill_chunks(m, seq, prompt, step, false, cancel, |_, _, _, _, last| {
        out = last;
        Ok(())
    })?;
    out.ok_or_else(|| anyhow!("the model returned no logits"))
}

/// Where the chunks of a `len`-token prefill end: every `step` tokens,
/// except that a chunk grows to the end of an image whose placeholders must
/// stay in one forward ([`plugin_api::MediaSpec::keep_images_whole`]).
fn chunk_ends(m: &LoadedModel, seq: &Sequence, len: usize, step: usize) -> Vec<usize> {
    let offset = seq.cache_offset().max(0) as usize;
    let mut ends = Vec::new();
    let mut at = 0;
    while at < len {
        let end = chunk_end(m, seq, offset + at, offset + len, step) - offset;
        ends.push(end);
        at = end;
    }
    ends
}

/// Where a chunk of the sequence starting at position `at` ends, at most
/// `limit`: `step` tokens on, or further to the end of an image of `seq`
/// the model keeps whole when that step would cut it.
pub(crate) fn chunk_end(m: &LoadedModel, seq: &Sequence, at: usize, limit: usize, step: usize) -> usize {
    let end = (at + step).min(limit);
    let whole = m.plan.media.as_ref().into_option().is_some_and(|s| s.keep_images_whole);
    let Some(media) = seq.media.as_ref().filter(|_| whole) else { return end };
    let cut = media
        .spans
        .iter()
        .filter(|s| s.whole)
        .map(|s| (s.start, s.start + s.rows.dim(0) as usize))
        .find(|&(s, e)| s < end && end < e);
    match cut {
        Some((_, e)) => e.min(limit),
        None => end,
    }
}

/// [`prefill_last_alone`]'s forwards into `seq`, calling `f(model, seq,
/// chunk, hidden, logits)` after each: the hidden state `[1, L, H]` when `want_hidden`,
/// the logits `[1, V]` for the final (one-token) chunk only.
pub(crate) fn prefill_chunks(
    m: &mut LoadedModel,
    seq: &mut Sequence,
    prompt: &[u32],
    step: usize,
    want_hidden: bool,
    cancel: Option<&AtomicBool>,
    mut f: impl FnMut(&mut LoadedModel, &mut Sequence, &[u32], Option<Array>, Option<Array>) -> Result<()>,
) -> Result<()> {
    let Some((_, head)) = prompt.split_last() else {
        bail!("the prompt is empty: nothing to generate from");
    };
    check_ids(m, prompt)?;
    let mut from = 0;
    for end in chunk_ends(m, seq, head.len(), step.max(1)) {
        let chunk = &head[from..end];
        from = end;
        check_cancel(cancel)?;
        let (_, h) =
            m.forward_io(&mut *seq, &ids_array(chunk)?, TokenSource::Prompt, LogitsWanted::None, want_hidden)?;
        seq.eval_caches()?;
        release_buffers();
        crate::memory::check()?;
        f(m, seq, chunk, h, None)?;
    }
    check_cancel(cancel)?;
    let last = &prompt[head.len()..];
    let (logits, h) =
        m.forward_io(&mut *seq, &ids_array(last)?, TokenSource::Prompt, LogitsWanted::Last, want_hidden)?;
    let logits = logits.ok_or_else(|| anyhow!("the model returned no logits"))?;
    let v = logits.dim(-1);
    f(m, seq, last, h, Some(logits.reshape(&[1, v])?))
}
