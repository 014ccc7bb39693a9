//! Rolling caches back to an earlier point (speculative decoding's rejected
//! drafts, a conversation's next turn).

use super::layer::CacheImpl;
use super::shared::SharedCache;
use mlx::{Error, Result};

/// Copies of just the caches that could not be trimmed back to where they
/// are now once more tokens are appended (recurrent states, windows that
/// will slide, quantization still to come); the others are trimmed on
/// restore, so a dense KV cache's buffer stays unshared and later writes stay
/// in place ([`Rollback::full`] copies every cache). Speculative decoding takes one
/// before each verify forward; a conversation takes one at each turn's end
/// of prefill, to fall back to when the next turn cannot rewind by trimming.
pub struct Rollback {
    offsets: Vec<i64>,
    saved: Vec<Option<Box<dyn CacheImpl>>>,
}

impl Rollback {
    /// A rollback point of `caches` good for rewinding up to `n` of the next
    /// `added` tokens; `None` when trimming alone will do.
    pub fn take(caches: &[SharedCache], added: i64, n: i64) -> Option<Rollback> {
        let mut offsets = Vec::with_capacity(caches.len());
        let saved: Vec<_> = caches
            .iter()
            .map(|c| {
                let c = c.lock();
                offsets.push(c.offset());
                (!c.can_trim_after(added, n)).then(|| c.snapshot())
            })
            .collect();
        saved.iter().any(Option::is_some).then_some(Rollback { offsets, saved })
    }

    /// A copy of every cache (arrays are immutable graph nodes, shared
    /// rather than copied): cheap, and good for any change.
    pub fn full(caches: &[SharedCache]) -> Rollback {
        let mut offsets = Vec::with_capacity(caches.len());
        let saved = caches
            .iter()
            .map(|c| {
                let c = c.lock();
                offsets.push(c.offset());
                Some(c.snapshot())
            })
            .collect();
        Rollback { offsets, saved }
    }

    /// A rollback point to come back to after any number of further tokens.
    pub fn take_for_any(caches: &[SharedCache]) -> Option<Rollback> {
        const ANY: i64 = 1 << 40;
        Self::take(caches, ANY, ANY)
    }

    /// Tokens the caches held when taken.
    pub fn tokens(&self) -> i64 {
        self.offsets.first().copied().unwrap_or(0)
    }

    /// Brings `caches` (the ones it was taken from) back to that state; the
    /// rollback point stays usable.
    pub fn restore_into(&self, caches: &[SharedCache]) -> Result<()> {
        if caches.len() != self.saved.len() {
            return Err(Error::msg(format!("rollback of {} caches restored into {}", self.saved.len(), caches.len())));
        }
        for ((c, s), &at) in caches.iter().zip(&self.saved).zip(&self.offsets) {
            let mut c = c.lock();
            match s {
                Some(s) => *c = s.snapshot(),
                None => {
                    let n = c.offset() - at;
                    if n < 0 || c.trim(n) != n {
                        return Err(Error::msg(format!(
                            "rollback: a cache at {} tokens cannot go back to {at}",
                            c.offset()
                        )));
                    }
                }
            }
        }
        Ok(())
    }
}

impl Clone for Rollback {
    fn clone(&self) -> Self {
        let saved = self.saved.iter().map(|s| s.as_ref().map(|s| s.snapshot())).collect();
        Rollback { offsets: self.offsets.clone(), saved }
    }
}

impl std::fmt::Debug for Rollback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let saved = self.saved.iter().filter(|s| s.is_some()).count();
        write!(f, "Rollback({} tokens, {saved} of {} caches copied)", self.tokens(), self.saved.len())
    }
}
