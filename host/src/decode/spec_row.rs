//! Speculative decoding for one request of a batching server: the request
//! keeps its own drafter caches (swapped into the server's one drafter for
//! its steps), fed during its prefill with the target's hidden states, and
//! decodes by draft-and-verify rounds on its own caches while it is the only
//! one decoding.

use super::drafter::{DraftCaches, Drafter};
use super::prefill::ids_array;
use super::speculative::{round, Round};
use crate::cache::SharedCache;
use crate::grammar::GrammarConstraint;
use crate::model::LoadedModel;
use crate::sample::SamplerParams;
use anyhow::{anyhow, Result};
use mlx::Array;

/// A request's drafter state.
pub struct RowDraft {
    caches: Option<DraftCaches>,
    begun: bool,
    /// The last prefill chunk's hidden states and the tokens after their
    /// first, waiting for the token that follows them.
    pending: Option<(Array, Vec<u32>)>,
    /// What the next round replays: the target's hidden states of the
    /// positions accepted last, and their tokens.
    next: Option<(Array, Array)>,
}

impl RowDraft {
    /// Empty drafter caches for a new request.
    pub fn new(d: &Drafter) -> Result<RowDraft> {
        Ok(RowDraft { caches: Some(d.fresh_caches()?), begun: false, pending: None, next: None })
    }

    /// Runs `f` with the row's drafter caches in the drafter.
    fn swapped<T>(&mut self, d: &mut Drafter, f: impl FnOnce(&mut Drafter, &mut Self) -> Result<T>) -> Result<T> {
        let mine = self.caches.take().ok_or_else(|| anyhow!("internal: the drafter caches are in use"))?;
        let theirs = d.swap_caches(mine);
        let r = f(d, self);
        self.caches = Some(d.swap_caches(theirs));
        r
    }

    /// Feeds the drafter what a prefill forward over `chunk` (the row's
    /// caches in `m`) gave: its hidden states wait for the token after the
    /// chunk, the previous chunk's go in now.
    pub(crate) fn feed(&mut self, m: &mut LoadedModel, d: &mut Drafter, chunk: &[u32], hidden: Array) -> Result<()> {
        self.swapped(d, |d, me| {
            if !me.begun {
                // Drafts only propose: a request that reuses a cached
                // prefix starts its drafter at the first token it feeds.
                d.begin(chunk[0])?;
                me.begun = true;
            }
            if let Some((h, mut toks)) = me.pending.take() {
                toks.push(chunk[0]);
                d.step(m, &h, &ids_array(&toks)?)?;
                d.eval_caches()?;
            }
            me.pending = Some((hidden, chunk[1..].to_vec()));
            Ok(())
        })
    }

    /// The prompt is in and `y` drawn after it: the first round replays the
    /// last chunk's positions and `y`.
    pub fn start(&mut self, y: u32) -> Result<()> {
        let (h, mut toks) = self.pending.take().ok_or_else(|| anyhow!("internal: the drafter saw no prefill"))?;
        toks.push(y);
        self.next = Some((h, ids_array(&toks)?));
        Ok(())
    }

    /// One round after `y` (the row's last token, not in its caches yet) on
    /// the row's `caches`, drafting up to `depth` tokens (masked by `guide`,
    /// the row's grammar, when it has one).
    #[allow(clippy::too_many_arguments)]
    pub fn round(
        &mut self,
        m: &mut LoadedModel,
        d: &mut Drafter,
        caches: &[SharedCache],
        y: u32,
        depth: usize,
        sampler: &SamplerParams,
        min_confidence: f32,
        guide: Option<&mut GrammarConstraint>,
    ) -> Result<Round> {
        let (mut hid, mut pend) = self.next.take().ok_or_else(|| anyhow!("internal: no round prepared"))?;
        let y = Array::from_slice(&[y as i32], &[1, 1])?;
        let r = m.with_sequence(caches, None, |m| {
            self.swapped(d, |d, _| round(m, d, &mut hid, &mut pend, &y, depth, sampler, min_confidence, guide))
        })?;
        self.next = Some((hid, pend));
        Ok(r)
    }

    /// Gives back the last `extra` tokens round `r` left in `caches`.
    pub fn give_back(m: &mut LoadedModel, caches: &[SharedCache], r: &Round, extra: usize) -> Result<()> {
        m.with_sequence(caches, None, |m| r.give_back(m, extra))
    }
}
