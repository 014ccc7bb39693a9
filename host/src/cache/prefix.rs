//! The prompt cache across requests: snapshots of finished sequences'
//! caches, keyed by the tokens they hold, reused for the longest prefix a
//! new prompt shares with one of them. Bounded in bytes: inserting evicts
//! the least recently used entries until the total fits (an entry larger
//! than the whole budget is not kept).

use super::layer::CacheImpl;
use super::shared::SharedCache;

struct Entry {
    tokens: Vec<u32>,
    caches: Vec<Box<dyn CacheImpl>>,
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
    pub fn lookup(&mut self, ids: &[u32]) -> Option<(usize, Vec<SharedCache>)> {
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
        let (i, common) = best?;
        self.clock += 1;
        let e = &mut self.entries[i];
        e.used_at = self.clock;
        let drop = (e.tokens.len() - common) as i64;
        let caches = e
            .caches
            .iter()
            .map(|c| {
                let mut copy = c.snapshot();
                if drop > 0 {
                    copy.trim(drop);
                }
                SharedCache::new(copy)
            })
            .collect();
        Some((common, caches))
    }

    /// Keeps a snapshot of `caches`, which hold exactly `tokens`. An entry
    /// the new one can stand for (its tokens a prefix of these, reachable
    /// by trimming) is dropped; then the least recently used go until the
    /// total fits the budget.
    pub fn insert(&mut self, tokens: Vec<u32>, caches: &[SharedCache]) {
        if tokens.is_empty() {
            return;
        }
        let snaps: Vec<Box<dyn CacheImpl>> = caches.iter().map(|c| c.lock().snapshot()).collect();
        let bytes = bytes_of(&snaps);
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
        self.entries.push(Entry { tokens, caches: snaps, bytes, used_at: self.clock });
    }
}
