//! The prompt cache across requests: snapshots of finished sequences'
//! caches, keyed by the tokens they hold, reused for the longest prefix a
//! new prompt shares with one of them. Bounded in bytes: inserting evicts
//! the least recently used entries until the total fits (an entry larger
//! than the whole budget is not kept). An entry may also keep a drafter's
//! state for its tokens, so a request that speculates after a hit drafts
//! with the whole context instead of starting its drafter at the hit.

use super::layer::CacheImpl;
use super::shared::SharedCache;
use mlx::Array;

/// A drafter's state beside an entry of `n` tokens: its caches, holding
/// `lead + n - 1` positions (every position's hidden state but the last
/// read, with the token after it), and the target's hidden state at the
/// last token, `[1, 1, H]`, waiting for the token that follows.
pub struct DraftState {
    /// The drafter's caches.
    pub caches: Vec<Box<dyn CacheImpl>>,
    /// Positions the drafter holds beyond the target's (see `Drafter`).
    pub lead: i64,
    /// The target's hidden state at the entry's last token.
    pub last_hidden: Array,
}

/// A drafter's state for the tokens a [`Hit`] gives.
pub struct DraftHit {
    /// The drafter's caches.
    pub caches: Vec<SharedCache>,
    /// Positions the drafter holds beyond the target's.
    pub lead: i64,
    /// The hidden state to read with the first token fed, when the hit is
    /// the entry's whole length; otherwise the drafter holds every
    /// position of the hit and waits for none.
    pub last_hidden: Option<Array>,
}

/// What [`PrefixCache::lookup`] found.
pub struct Hit {
    /// Tokens of the prompt the caches hold.
    pub tokens: usize,
    /// The target's caches.
    pub caches: Vec<SharedCache>,
    /// The drafter's, when asked for and kept.
    pub draft: Option<DraftHit>,
}

struct Entry {
    tokens: Vec<u32>,
    caches: Vec<Box<dyn CacheImpl>>,
    draft: Option<DraftState>,
    bytes: usize,
    used_at: u64,
}

/// Cache snapshots by token prefix, least recently used out first.
pub struct PrefixCache {
    entries: Vec<Entry>,
    budget: usize,
    used: usize,
    clock: u64,
}

fn bytes_of(caches: &[Box<dyn CacheImpl>]) -> usize {
    caches.iter().flat_map(|c| c.arrays()).map(|a| a.nbytes()).sum()
}

/// Copies of `caches`, each less its last `drop` tokens.
fn copies(caches: &[Box<dyn CacheImpl>], drop: i64) -> Vec<SharedCache> {
    caches
        .iter()
        .map(|c| {
            let mut copy = c.snapshot();
            if drop > 0 {
                copy.trim(drop);
            }
            SharedCache::new(copy)
        })
        .collect()
}

impl PrefixCache {
    /// An empty cache holding at most `budget` bytes.
    pub fn new(budget: usize) -> PrefixCache {
        PrefixCache { entries: Vec::new(), budget, used: 0, clock: 0 }
    }

    /// Bytes held now.
    pub fn bytes(&self) -> usize {
        self.used
    }

    /// Entries held now.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Caches holding the longest prefix of `ids` that an entry can give
    /// exactly (trimmed back when every cache of the entry can rewind; a
    /// slid window or a recurrent state only at the entry's own length),
    /// leaving at least one token of `ids` to feed. `None` when no entry
    /// shares a token.
    ///
    /// With `draft`, the entry's drafter state comes too when it has one.
    /// A hit short of the entry's length then gives one token less, whose
    /// hidden state the drafter will need (the entry keeps only its last).
    pub fn lookup(&mut self, ids: &[u32], draft: bool) -> Option<Hit> {
        let limit = ids.len().saturating_sub(1);
        let mut best: Option<(usize, usize)> = None;
        for (i, e) in self.entries.iter().enumerate() {
            let common = e.tokens.iter().zip(ids).take_while(|(a, b)| a == b).count().min(limit);
            if common == 0 || best.is_some_and(|(_, c)| c >= common) {
                continue;
            }
            let drop = (e.tokens.len() - common) as i64;
            if drop == 0 || e.caches.iter().all(|c| c.can_trim(drop)) {
                best = Some((i, common));
            }
        }
        let (i, mut common) = best?;
        self.clock += 1;
        let e = &mut self.entries[i];
        e.used_at = self.clock;
        let n = e.tokens.len();
        let mut hit_draft = None;
        if let Some(ds) = e.draft.as_ref().filter(|_| draft) {
            if common == n {
                hit_draft = Some(DraftHit {
                    caches: copies(&ds.caches, 0),
                    lead: ds.lead,
                    last_hidden: Some(ds.last_hidden.clone()),
                });
            } else {
                // One token less: the drafter holds it with the token after.
                let (k, extra) = (common - 1, (n - common) as i64);
                if k > 0
                    && e.caches.iter().all(|c| c.can_trim(extra + 1))
                    && ds.caches.iter().all(|c| c.can_trim(extra))
                {
                    common = k;
                    hit_draft = Some(DraftHit { caches: copies(&ds.caches, extra), lead: ds.lead, last_hidden: None });
                }
            }
        }
        let caches = copies(&e.caches, (n - common) as i64);
        Some(Hit { tokens: common, caches, draft: hit_draft })
    }

    /// Keeps a snapshot of `caches`, which hold exactly `tokens`. An entry
    /// the new one can stand for (its tokens a prefix of these, reachable
    /// by trimming) is dropped; then the least recently used go until the
    /// total fits the budget. `draft` is a drafter's state for the same
    /// tokens ([`DraftState`]).
    pub fn insert(&mut self, tokens: Vec<u32>, caches: &[SharedCache], draft: Option<DraftState>) {
        if tokens.is_empty() {
            return;
        }
        let snaps: Vec<Box<dyn CacheImpl>> = caches.iter().map(|c| c.lock().snapshot()).collect();
        let bytes = bytes_of(&snaps) + draft.as_ref().map_or(0, |d| bytes_of(&d.caches) + d.last_hidden.nbytes());
        if bytes > self.budget {
            return;
        }
        let covered = |e: &Entry| {
            let n = e.tokens.len();
            n <= tokens.len()
                && e.tokens[..] == tokens[..n]
                && snaps.iter().all(|c| n == tokens.len() || c.can_trim((tokens.len() - n) as i64))
        };
        let mut used = self.used;
        self.entries.retain(|e| {
            let keep = !covered(e);
            if !keep {
                used -= e.bytes;
            }
            keep
        });
        self.used = used;
        while self.used + bytes > self.budget {
            let Some(oldest) = self.entries.iter().enumerate().min_by_key(|(_, e)| e.used_at).map(|(i, _)| i) else {
                break;
            };
            self.used -= self.entries.remove(oldest).bytes;
        }
        self.clock += 1;
        self.used += bytes;
        self.entries.push(Entry { tokens, caches: snaps, draft, bytes, used_at: self.clock });
    }
}
