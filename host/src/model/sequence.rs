//! One sequence's state, passed into every forward (as mlx-lm passes
//! `cache=` into `model(x, cache=…)`): its caches, as the host holds them
//! and as the plugin sees them, the images and clips spliced into it, and
//! the drafter's own caches when it is decoded speculatively, and the token
//! ids the caches hold (what prompt reuse and the prefix cache match
//! against). The model
//! ([`super::LoadedModel`]) holds nothing of any sequence.

use super::media::MediaState;
use crate::cache::{make_caches, CacheImpl, CacheOptions, Rollback, SharedCache};
use abi_stable::std_types::RVec;
use anyhow::{anyhow, Result};
use mlx::Array;
use plugin_api::abi::CacheBox;
use plugin_api::CacheKind;

/// One sequence: its caches and the ids they hold, its media, its drafter
/// caches and what its drafter replays next.
pub struct Sequence {
    kinds: Vec<CacheKind>,
    opts: CacheOptions,
    caches: Vec<SharedCache>,
    /// The plugin's view of the same caches.
    boxes: RVec<CacheBox>,
    /// The token ids the caches hold, in order, as their owner recorded
    /// them (see [`Sequence::ids`]).
    ids: Vec<u32>,
    /// The images and clips of the sequence (none: text).
    pub media: Option<MediaState>,
    /// The drafter's caches for this sequence, once it is decoded
    /// speculatively.
    pub draft: Option<DraftCaches>,
    /// What the drafter replays next, for a server's row that may
    /// speculate (kept by `crate::decode::RowDraft`'s functions; a session
    /// decodes a whole reply in one loop and keeps it there).
    pub row_draft: Option<RowDraft>,
}

impl Sequence {
    /// An empty sequence with one cache per entry of `kinds` (the plan's
    /// cache layout), made with `opts`.
    pub fn new(kinds: &[CacheKind], opts: &CacheOptions) -> Result<Sequence> {
        let caches = make_caches(kinds, opts)?;
        Ok(Sequence::with_caches(kinds, opts, caches))
    }

    /// A sequence over `caches` already filled (a prompt-cache hit, a file
    /// read back), one per entry of `kinds`.
    pub fn with_caches(kinds: &[CacheKind], opts: &CacheOptions, caches: Vec<SharedCache>) -> Sequence {
        let boxes = caches.iter().map(SharedCache::boxed).collect();
        Sequence {
            kinds: kinds.to_vec(),
            opts: opts.clone(),
            caches,
            boxes,
            ids: Vec::new(),
            media: None,
            draft: None,
            row_draft: None,
        }
    }

    /// Starts over: empty caches, no ids, no media, no drafter state.
    pub fn reset(&mut self) -> Result<()> {
        *self = Sequence::new(&self.kinds, &self.opts)?;
        Ok(())
    }

    /// Puts `caches` (one per plan slot, e.g. read from a file) in place of
    /// the sequence's; its ids, media and drafter state are dropped (the
    /// caller records the ids the new caches hold: [`Sequence::set_ids`]).
    pub fn replace_caches(&mut self, caches: Vec<SharedCache>) {
        *self = Sequence::with_caches(&self.kinds, &self.opts, caches);
    }

    /// Its caches, one per plan slot.
    pub fn caches(&self) -> &[SharedCache] {
        &self.caches
    }

    /// The plugin's view of the caches.
    pub(crate) fn boxes_mut(&mut self) -> &mut RVec<CacheBox> {
        &mut self.boxes
    }

    /// The token ids the caches hold, in order. Whoever feeds the caches
    /// records them ([`Sequence::set_ids`], [`Sequence::push_ids`]); a
    /// forward does not, since it sees embeddings, not always ids. They
    /// never run past what the caches hold: trimming and restoring drop
    /// those beyond. Fewer than [`Sequence::cache_offset`] while a turn
    /// has fed tokens not recorded yet: check the two agree before
    /// trusting them.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// Records `ids` as what the caches hold.
    pub fn set_ids(&mut self, ids: Vec<u32>) {
        self.ids = ids;
    }

    /// Records that the caches now hold `ids` after what they held.
    pub fn push_ids(&mut self, ids: &[u32]) {
        self.ids.extend_from_slice(ids);
    }

    /// The plugin's view of the target caches and the drafter's caches, for
    /// a drafter step (an error when the sequence has no drafter caches).
    pub(crate) fn draft_parts(&mut self) -> Result<(&mut RVec<CacheBox>, &mut DraftCaches)> {
        let d = self.draft.as_mut().ok_or_else(|| anyhow!("internal: the sequence has no drafter caches"))?;
        Ok((&mut self.boxes, d))
    }

    /// Tokens currently held by the caches (the most any slot holds: a rank
    /// of a pipeline split writes only its own layers' slots).
    pub fn cache_offset(&self) -> i64 {
        self.caches.iter().map(|c| c.lock().offset()).max().unwrap_or(0)
    }

    /// A cheap copy of every cache (arrays are shared, not copied), for
    /// [`Sequence::restore`].
    pub fn snapshot(&self) -> Rollback {
        Rollback::full(&self.caches)
    }

    /// Puts the caches back as `snap` recorded them; `snap` stays usable.
    /// The ids recorded past that point go.
    pub fn restore(&mut self, snap: &Rollback) -> Result<()> {
        snap.restore_into(&self.caches)?;
        self.clip_ids();
        Ok(())
    }

    /// Drops the ids recorded past what the caches now hold.
    fn clip_ids(&mut self) {
        let held = self.cache_offset().max(0) as usize;
        self.ids.truncate(held);
    }

    /// Drops the last `n` tokens from every cache. Returns false, changing
    /// nothing, when some cache cannot rewind exactly (a window that has
    /// slid, a recurrent state): restore a snapshot instead.
    pub fn trim(&mut self, n: usize) -> bool {
        let n = n as i64;
        // Slots nothing was written to (the layers another rank of a
        // pipeline split holds) have nothing to trim.
        let used = || self.caches.iter().filter(|c| c.lock().offset() > 0);
        if !used().all(|c| c.lock().can_trim(n)) {
            return false;
        }
        for c in used() {
            c.lock().trim(n);
        }
        self.clip_ids();
        true
    }

    /// Evaluates the cache contents (after a prefill chunk).
    pub fn eval_caches(&self) -> Result<()> {
        eval_all(&self.caches)
    }
}

fn eval_all(caches: &[SharedCache]) -> Result<()> {
    let arrays: Vec<Array> = caches.iter().flat_map(|c| c.lock().arrays()).collect();
    mlx::eval(&arrays.iter().collect::<Vec<_>>()).map_err(Into::into)
}

/// What a server row's drafter replays next: its behaviour is in
/// `crate::decode::RowDraft`'s functions, its state is the sequence's.
pub struct RowDraft {
    /// The drafter has read the sequence's first token.
    pub(crate) begun: bool,
    /// The last prefill chunk's hidden states and the tokens after their
    /// first, waiting for the token that follows them.
    pub(crate) pending: Option<(Array, Vec<u32>)>,
    /// What the next round replays: the target's hidden states of the
    /// positions accepted last, and their tokens.
    pub(crate) next: Option<(Array, Array)>,
}

/// A drafter's caches for one sequence, and where they stand against the
/// target's.
pub struct DraftCaches {
    caches: Vec<SharedCache>,
    boxes: RVec<CacheBox>,
    lead: i64,
    /// Which drafter made them (a drafter swapped in starts its own).
    owner: u64,
}

impl DraftCaches {
    /// Caches `owner` (a drafter's id) reads and writes, holding `lead`
    /// positions beyond the target's.
    pub(crate) fn from_parts(caches: Vec<SharedCache>, lead: i64, owner: u64) -> DraftCaches {
        let boxes = caches.iter().map(SharedCache::boxed).collect();
        DraftCaches { caches, boxes, lead, owner }
    }

    /// Copies of the caches (sharing their arrays), and the lead.
    pub(crate) fn copies(&self) -> (Vec<Box<dyn CacheImpl>>, i64) {
        (self.caches.iter().map(|c| c.lock().snapshot()).collect(), self.lead)
    }

    /// A copy to work on (sharing the arrays).
    pub(crate) fn snapshot(&self) -> DraftCaches {
        let (copies, lead) = self.copies();
        DraftCaches::from_parts(copies.into_iter().map(SharedCache::new).collect(), lead, self.owner)
    }

    /// Where the caches stand against the target's: positions held beyond
    /// what the target's caches hold at the same point (the first token,
    /// for drafters that read it in `begin`).
    pub(crate) fn lead(&self) -> i64 {
        self.lead
    }

    /// Sets the lead (what the drafter's `begin` read).
    pub(crate) fn set_lead(&mut self, lead: i64) {
        self.lead = lead;
    }

    /// The id of the drafter that made them.
    pub(crate) fn owner(&self) -> u64 {
        self.owner
    }

    /// The plugin's view of the caches.
    pub(crate) fn boxes_mut(&mut self) -> &mut RVec<CacheBox> {
        &mut self.boxes
    }

    /// Positions the caches hold.
    pub(crate) fn offset(&self) -> i64 {
        self.caches.first().map_or(0, |c| c.lock().offset())
    }

    /// Trims the caches to `offset` tokens; false when some cache could not
    /// rewind exactly (the caller starts them over).
    pub(crate) fn trim_to(&mut self, offset: i64) -> bool {
        let mut exact = true;
        for c in &self.caches {
            let mut c = c.lock();
            let n = c.offset() - offset;
            if n > 0 && c.trim(n) != n {
                exact = false;
            }
        }
        exact
    }

    /// Evaluates the cache contents.
    pub(crate) fn eval_caches(&self) -> Result<()> {
        eval_all(&self.caches)
    }
}
