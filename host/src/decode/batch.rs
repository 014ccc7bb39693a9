//! Continuous batching's two steps: a sequence's prompt prefilled into its
//! own caches, and one decode step for many sequences in one forward (the
//! same [`LoadedModel::forward`] a lone sequence takes, on a
//! [`BatchCaches`]). The scheduler that decides who joins and leaves
//! between steps is the caller's (the server's engine).

use super::drafter::Drafter;
use super::params::{check_cancel, release_buffers};
use super::prefill::{check_ids, chunk_end, ids_array};
use crate::cache::BatchCaches;
use crate::model::{LoadedModel, RowDraft, Sequence};
use anyhow::{anyhow, Result};
use mlx::{Array, Dtype};
use plugin_api::{LogitsWanted, TokenSource};
use std::sync::atomic::AtomicBool;

/// Prefills `prompt` into `seq` in chunks of `step`, returning the last
/// position's logits `[1, V]`. The loop of [`prefill_step`]s a server
/// runs, at once.
pub fn prefill_into(
    m: &mut LoadedModel,
    seq: &mut Sequence,
    prompt: &[u32],
    step: usize,
    cancel: Option<&AtomicBool>,
) -> Result<Array> {
    if prompt.is_empty() {
        anyhow::bail!("the prompt is empty: nothing to generate from");
    }
    check_ids(m, prompt)?;
    let mut fed = 0;
    loop {
        check_cancel(cancel)?;
        if let Some(l) = prefill_step(m, seq, prompt, &mut fed, step, None)? {
            return Ok(l);
        }
    }
}

/// Feeds the next piece of `prompt` into `seq`, from `*fed` on: up to
/// `step` tokens of all but the last; once only the last is left, it
/// alone, returning its logits `[1, V]` (the split
/// [`super::prefill_last_alone`] makes, so a batched sequence matches one
/// run alone). The sequence's images and clips are spliced in where the
/// chunk covers them (an image kept whole in one chunk when the family
/// asks). With `draft` (the request's drafter, its replay state in
/// [`Sequence::row_draft`]), the drafter is fed the target's hidden states
/// chunk by chunk, as [`super::generate_speculative`] feeds it.
/// Advances `*fed`.
pub fn prefill_step(
    m: &mut LoadedModel,
    seq: &mut Sequence,
    prompt: &[u32],
    fed: &mut usize,
    step: usize,
    mut draft: Option<&mut Drafter>,
) -> Result<Option<Array>> {
    let head = prompt.len().saturating_sub(1);
    if *fed < head {
        let end = chunk_end(m, seq, *fed, head, step.max(1));
        let chunk = &prompt[*fed..end];
        let (_, h) =
            m.forward_io(&mut *seq, &ids_array(chunk)?, TokenSource::Prompt, LogitsWanted::None, draft.is_some())?;
        seq.eval_caches()?;
        if let (Some(d), Some(h)) = (draft.as_mut(), h) {
            RowDraft::feed(m, seq, d, chunk, h)?;
        }
        release_buffers();
        crate::memory::check()?;
        *fed = end;
        return Ok(None);
    }
    let last = &prompt[head..];
    let (l, h) =
        m.forward_io(&mut *seq, &ids_array(last)?, TokenSource::Prompt, LogitsWanted::Last, draft.is_some())?;
    let l = l.ok_or_else(|| anyhow!("no logits"))?;
    if let (Some(d), Some(h)) = (draft.as_mut(), h) {
        RowDraft::feed(m, seq, d, last, h)?;
    }
    *fed = prompt.len();
    let v = l.dim(-1);
    Ok(Some(l.reshape(&[1, v])?))
}

/// One decode step: the batch's row `r` is fed `tokens[r]` (`[B]` int32,
/// on the device: possibly the previous step's draws, not yet read);
/// returns the logits `[B, V]`. The batch must hold the rows in that order
/// ([`BatchCaches::set_rows`]).
pub fn decode_step(m: &mut LoadedModel, batch: &BatchCaches, tokens: &Array) -> Result<Array> {
    let t = tokens.reshape(&[tokens.dim(0), 1])?.astype(Dtype::I32)?;
    let l = m.forward(batch, &t, TokenSource::Generated, LogitsWanted::Last)?.ok_or_else(|| anyhow!("no logits"))?;
    let (b, v) = (l.dim(0), l.dim(2));
    Ok(l.reshape(&[b, v])?)
}

/// One decode step for a sequence decoding alone, on its own caches (the
/// path `generate` takes: nothing stacked or masked): `token` `[1]` int32
/// on the device; returns the logits `[1, V]`. The sequence's media
/// carries the position shift of a family that places images in 2-D.
pub fn decode_alone(m: &mut LoadedModel, seq: &mut Sequence, token: &Array) -> Result<Array> {
    let t = token.reshape(&[1, 1])?.astype(Dtype::I32)?;
    let l = m.forward(seq, &t, TokenSource::Generated, LogitsWanted::Last)?.ok_or_else(|| anyhow!("no logits"))?;
    let v = l.dim(-1);
    Ok(l.reshape(&[1, v])?)
}
