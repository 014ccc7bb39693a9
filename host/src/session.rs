//! A conversation kept across turns: the caches stay warm and each turn
//! prefills only what follows the longest common prefix with what is cached.

use crate::cache::Checkpoint;
use crate::generate::{generate, GenParams, GenStats};
use crate::model::LoadedModel;
use anyhow::Result;

/// Token-level memory of what the caches hold.
#[derive(Debug, Default, Clone)]
pub struct PromptCache {
    /// Ids whose keys/values are in the caches, in order.
    pub cached: Vec<u32>,
    /// The caches at the end of the last turn's prefill (its whole prompt,
    /// `cached[..tokens]`), kept when some cache cannot rewind by trimming.
    pub checkpoint: Option<Checkpoint>,
}

impl PromptCache {
    /// Makes the caches hold a prefix of `ids` and returns where prefill must
    /// start. Rewinds by trimming when every cache can; otherwise (a wrapped
    /// window, a recurrent state) goes back to the last turn's checkpoint
    /// when it is a prefix of `ids`, and starts over only when it is not.
    pub fn prepare(&mut self, model: &mut LoadedModel, ids: &[u32]) -> Result<usize> {
        let mut common = self.cached.iter().zip(ids).take_while(|(a, b)| a == b).count();
        // At least one token must be fed to get logits for the next one.
        if common == ids.len() {
            common = common.saturating_sub(1);
        }
        // Every cache must hold exactly `cached` (a recurrent state cannot
        // give back the step the decode loop queued ahead).
        let in_step = model.caches.iter().all(|c| c.lock().offset() == self.cached.len() as i64);
        if in_step && model.trim(self.cached.len() - common) {
            self.cached.truncate(common);
            return Ok(common);
        }
        if let Some(cp) = &self.checkpoint {
            let at = cp.tokens() as usize;
            if at <= common && cp.restore_into(&model.caches).is_ok() {
                self.cached.truncate(at);
                return Ok(at);
            }
        }
        model.reset_caches()?;
        self.cached.clear();
        self.checkpoint = None;
        Ok(0)
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
        let p = &GenParams { checkpoint_prompt: true, ..p.clone() };
        let stats = match generate(model, &ids[start..], p, on_token) {
            Ok(s) => s,
            Err(e) => {
                // The caches may hold a partial prefill: forget them.
                self.cached.clear();
                model.reset_caches()?;
                return Err(e);
            }
        };
        self.checkpoint = model.prompt_checkpoint.take();
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
        self.checkpoint = None;
    }
}
