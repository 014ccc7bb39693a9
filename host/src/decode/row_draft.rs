//! Speculative decoding for one request of a batching server: the request's
//! sequence holds its own drafter caches ([`Sequence::draft`]), fed during
//! its prefill with the target's hidden states, and it decodes by
//! draft-and-verify rounds on its own caches while it is the only one
//! decoding. What the rounds replay is the sequence's too
//! ([`Sequence::row_draft`]); the functions here keep it.

use super::drafter::Drafter;
use super::prefill::ids_array;
use super::speculative::{round, Round, RoundGuide};
use crate::cache::{DraftHit, DraftState};
use crate::model::{DraftCaches, LoadedModel, RowDraft, Sequence};
use crate::sample::SamplerParams;
use anyhow::{anyhow, Result};
use mlx::Array;

impl RowDraft {
    /// A new request: empty drafter caches and a fresh [`RowDraft`] go
    /// into `seq`.
    pub fn attach(d: &Drafter, seq: &mut Sequence) -> Result<()> {
        seq.draft = Some(d.fresh_caches()?);
        seq.row_draft = Some(RowDraft { begun: false, pending: None, next: None });
        Ok(())
    }

    /// A request whose prompt-cache hit came with the drafter's state for
    /// the same tokens (its caches go into `seq`): it drafts with the whole
    /// context.
    pub fn resume(d: &Drafter, hit: DraftHit, seq: &mut Sequence) {
        let pending = hit.last_hidden.map(|h| (h, Vec::new()));
        seq.draft = Some(DraftCaches::from_parts(hit.caches, hit.lead, d.id()));
        seq.row_draft = Some(RowDraft { begun: true, pending, next: None });
    }

    /// The drafter's state for the `n` tokens `seq`'s caches hold, for the
    /// prompt cache ([`DraftState`]): the hidden states not read yet are
    /// read into a copy of the drafter's caches, all but the last, which is
    /// kept. `None` when the sequence does not speculate or the drafter
    /// does not stand where it does (a round gave tokens back).
    pub fn state(m: &LoadedModel, d: &mut Drafter, seq: &mut Sequence, n: i64) -> Result<Option<DraftState>> {
        let Some(rd) = seq.row_draft.as_ref() else { return Ok(None) };
        // Before the first token: the last prefill chunk's hidden states and
        // the tokens after each but the last; after a round: its positions'
        // and the tokens after each (the last not in the caches yet).
        let (h, toks) = match (&rd.pending, &rd.next) {
            (Some((h, t)), None) => (h.clone(), ids_array(t)?),
            (None, Some((h, t))) => (h.clone(), t.clone()),
            _ => return Ok(None),
        };
        let Some(mine) = seq.draft.as_ref() else { return Ok(None) };
        let l = h.dim(1);
        if l < 1 || mine.offset() != mine.lead() + n - l as i64 {
            return Ok(None);
        }
        let mut copy = mine.snapshot();
        if l > 1 {
            let (hh, tt) = (h.slice_axis(1, 0, l - 1)?, toks.slice_axis(1, 0, l - 1)?);
            d.step(m.plan.vocab_size, seq.boxes_mut(), &mut copy, &hh, &tt)?;
            copy.eval_caches()?;
        }
        let (caches, lead) = copy.copies();
        // A copy, evaluated: a slice would keep the whole chunk's hidden
        // states alive for as long as the prompt cache keeps the entry.
        // (contiguous() would share a row-contiguous slice's buffer.)
        let zero = Array::f32(0.0).astype(h.dtype())?;
        let last_hidden = h.slice_axis(1, l - 1, l)?.add(&zero)?;
        mlx::eval(&[&last_hidden])?;
        Ok(Some(DraftState { caches, lead, last_hidden }))
    }

    /// Feeds `seq`'s drafter what a prefill forward over `chunk` (into
    /// `seq`) gave: its hidden states wait for the token after the chunk,
    /// the previous chunk's go in now.
    pub(crate) fn feed(
        m: &LoadedModel,
        seq: &mut Sequence,
        d: &mut Drafter,
        chunk: &[u32],
        hidden: Array,
    ) -> Result<()> {
        let rd = mine(seq)?;
        let begin = !rd.begun;
        rd.begun = true;
        let pending = rd.pending.take();
        let (target, own) = seq.draft_parts()?;
        if begin {
            // Drafts only propose: a request that reuses a cached
            // prefix starts its drafter at the first token it feeds.
            d.begin(own, chunk[0])?;
        }
        if let Some((h, mut toks)) = pending {
            toks.push(chunk[0]);
            d.step(m.plan.vocab_size, target, own, &h, &ids_array(&toks)?)?;
            own.eval_caches()?;
        }
        mine(seq)?.pending = Some((hidden, chunk[1..].to_vec()));
        Ok(())
    }

    /// `seq`'s prompt is in and `y` drawn after it: the first round replays
    /// the last chunk's positions and `y`.
    pub fn start(seq: &mut Sequence, y: u32) -> Result<()> {
        let rd = mine(seq)?;
        let (h, mut toks) = rd.pending.take().ok_or_else(|| anyhow!("internal: the drafter saw no prefill"))?;
        toks.push(y);
        rd.next = Some((h, ids_array(&toks)?));
        Ok(())
    }

    /// One round after `y` (the row's last token, not in its caches yet) on
    /// `seq`, drafting up to `depth` tokens (shaped by `guide`: the row's
    /// grammar and penalties).
    #[allow(clippy::too_many_arguments)]
    pub fn round(
        m: &mut LoadedModel,
        d: &mut Drafter,
        seq: &mut Sequence,
        y: u32,
        depth: usize,
        sampler: &SamplerParams,
        min_confidence: f32,
        guide: RoundGuide<'_>,
    ) -> Result<Round> {
        let (mut hid, mut pend) = mine(seq)?.next.take().ok_or_else(|| anyhow!("internal: no round prepared"))?;
        let y = Array::from_slice(&[y as i32], &[1, 1])?;
        let r = round(m, seq, d, &mut hid, &mut pend, &y, depth, sampler, min_confidence, guide)?;
        mine(seq)?.next = Some((hid, pend));
        Ok(r)
    }

    /// Gives back the last `extra` tokens round `r` left in `seq`'s caches.
    /// The positions the next round would replay lose as many, so the
    /// drafter still stands where the sequence does ([`RowDraft::state`]).
    pub fn give_back(m: &mut LoadedModel, seq: &mut Sequence, r: &Round, extra: usize) -> Result<()> {
        r.give_back(m, seq, extra)?;
        let rd = mine(seq)?;
        if let Some((h, t)) = rd.next.take() {
            let keep = h.dim(1) - extra as i32;
            if keep >= 1 {
                rd.next = Some((h.slice_axis(1, 0, keep)?, t.slice_axis(1, 0, keep)?));
            }
        }
        Ok(())
    }
}

/// The replay state of `seq`, which speculates as a server row.
fn mine(seq: &mut Sequence) -> Result<&mut RowDraft> {
    seq.row_draft.as_mut().ok_or_else(|| anyhow!("internal: the sequence has no row drafter state"))
}
