//! A conversation kept across turns: the caches stay warm and each turn
//! prefills only what follows the longest common prefix with what is cached.

use crate::generate::{generate, GenParams, GenStats};
use crate::model::LoadedModel;
use anyhow::Result;

/// Token-level memory of what the caches hold.
#[derive(Debug, Default, Clone)]
pub struct PromptCache {
    /// Ids whose keys/values are in the caches, in order.
    pub cached: Vec<u32>,
}

impl PromptCache {
    /// Makes the caches hold a prefix of `ids` and returns where prefill must
    /// start. Rewinds by trimming when every cache can; otherwise (a wrapped
    /// window, a recurrent state) starts over.
    pub fn prepare(&mut self, model: &mut LoadedModel, ids: &[u32]) -> Result<usize> {
        let mut common = self.cached.iter().zip(ids).take_while(|(a, b)| a == b).count();
        // At least one token must be fed to get logits for the next one.
        if common == ids.len() {
            common = common.saturating_sub(1);
        }
        let drop = (self.cached.len() - common) as i64;
        let trimmable = model.caches.iter().all(|c| c.lock().can_trim(drop));
        if trimmable && model.cache_offset() == self.cached.len() as i64 {
            for c in &model.caches {
                c.lock().trim(drop);
            }
            self.cached.truncate(common);
            Ok(common)
        } else {
            model.reset_caches()?;
            self.cached.clear();
            Ok(0)
        }
    }

    /// Generates a reply to `ids` (the whole conversation so far), reusing
    /// the cached prefix. Returns the stats and how many prompt tokens were
    /// actually prefilled.
    pub fn generate(
        &mut self,
        model: &mut LoadedModel,
        ids: &[u32],
        p: &GenParams,
        on_token: impl FnMut(u32) -> bool,
    ) -> Result<(GenStats, usize)> {
        let start = self.prepare(model, ids)?;
        let stats = match generate(model, &ids[start..], p, on_token) {
            Ok(s) => s,
            Err(e) => {
                // The caches may hold a partial prefill: forget them.
                self.cached.clear();
                model.reset_caches()?;
                return Err(e);
            }
        };
        // The last generated token was never fed back, the rest were.
        self.cached = ids.to_vec();
        if let Some((_, fed)) = stats.tokens.split_last() {
            self.cached.extend_from_slice(fed);
        }
        Ok((stats, ids.len() - start))
    }

    /// Forgets everything (e.g. after `/reset` or a cache-layout change).
    pub fn clear(&mut self) {
        self.cached.clear();
    }
}
