//! A session: a loaded model with its decoding state. The caches stay warm
//! across turns (each turn prefills only what follows the longest common
//! prefix with what is cached), the drafter for speculative decoding, and
//! the rollback point a turn falls back to when a cache cannot rewind.

use crate::cache::Rollback;
use crate::decode::{generate, generate_speculative, DraftSource, Drafter, GenParams, GenStats, SpecParams};
use crate::model::LoadedModel;
use crate::plugins::FamilyEntry;
use anyhow::Result;
use std::sync::Arc;

/// A model and what decoding keeps between calls.
pub struct Session {
    /// The model (weights, plugin model, caches).
    pub model: LoadedModel,
    /// The drafter speculative decoding uses, when one is loaded.
    pub drafter: Option<Drafter>,
    /// Speculative decoding settings.
    pub spec: SpecParams,
    /// Ids whose keys/values are in the caches, in order.
    pub cached: Vec<u32>,
    /// The caches at the end of the last turn's prefill (its whole prompt,
    /// `cached[..tokens]`), kept when some cache cannot rewind by trimming.
    pub rollback: Option<Rollback>,
}

impl Session {
    /// A session over `model` with empty memory and no drafter.
    pub fn new(model: LoadedModel) -> Session {
        Session { model, drafter: None, spec: SpecParams::default(), cached: Vec::new(), rollback: None }
    }

    /// Makes the caches hold a prefix of `ids` and returns where prefill must
    /// start. Rewinds by trimming when every cache can; otherwise (a wrapped
    /// window, a recurrent state) goes back to the last turn's rollback point
    /// when it is a prefix of `ids`, and starts over only when it is not.
    pub fn prepare(&mut self, ids: &[u32]) -> Result<usize> {
        let mut common = self.cached.iter().zip(ids).take_while(|(a, b)| a == b).count();
        // At least one token must be fed to get logits for the next one.
        if common == ids.len() {
            common = common.saturating_sub(1);
        }
        // Every cache must hold exactly `cached` (a recurrent state cannot
        // give back the step the decode loop queued ahead).
        let in_step = self.model.caches.iter().all(|c| c.lock().offset() == self.cached.len() as i64);
        if in_step && self.model.trim(self.cached.len() - common) {
            self.cached.truncate(common);
            return Ok(common);
        }
        if let Some(cp) = &self.rollback {
            let at = cp.tokens() as usize;
            if at <= common && cp.restore_into(&self.model.caches).is_ok() {
                self.cached.truncate(at);
                return Ok(at);
            }
        }
        self.reset()?;
        Ok(0)
    }

    /// Generates a reply to `ids` (the whole conversation so far), reusing
    /// the cached prefix, with the drafter when one is loaded. Returns the
    /// stats and how many prompt tokens were actually prefilled.
    pub fn generate(
        &mut self,
        ids: &[u32],
        p: &GenParams,
        on_token: impl FnMut(u32) -> bool,
    ) -> Result<(GenStats, usize)> {
        let start = self.prepare(ids)?;
        let p = &GenParams { keep_prompt_rollback: true, ..p.clone() };
        let mut stats = match self.run(&ids[start..], p, on_token) {
            Ok(s) => s,
            Err(e) => {
                // The caches may hold a partial prefill: forget them.
                self.reset()?;
                return Err(e);
            }
        };
        self.rollback = stats.prompt_rollback.take();
        // The last generated token was never fed back, the rest were.
        self.cached = ids.to_vec();
        if let Some((_, fed)) = stats.tokens.split_last() {
            self.cached.extend_from_slice(fed);
        }
        Ok((stats, ids.len() - start))
    }

    /// Generates after `prompt` from the caches as they are (no prefix
    /// reuse, nothing remembered): with the drafter when one is loaded.
    pub fn run(&mut self, prompt: &[u32], p: &GenParams, on_token: impl FnMut(u32) -> bool) -> Result<GenStats> {
        match self.drafter.as_mut() {
            Some(d) => generate_speculative(&mut self.model, d, prompt, p, &self.spec, on_token)
                .map_err(crate::memory::explain),
            None => generate(&mut self.model, prompt, p, on_token),
        }
    }

    /// Empties the caches and forgets what they held.
    pub fn reset(&mut self) -> Result<()> {
        self.forget();
        self.model.reset_caches()
    }

    /// Forgets what the caches hold (they are about to be replaced).
    pub fn forget(&mut self) {
        self.cached.clear();
        self.rollback = None;
    }

    /// Swaps in another build of the serving family (hot reload), rebuilding
    /// the model from the weights in memory and the target's own draft head
    /// from the new build. Returns whether the caches survived.
    pub fn swap_family(&mut self, fam: Arc<FamilyEntry>) -> Result<bool> {
        let kept = self.model.swap_family(fam)?;
        if self.drafter.as_ref().is_some_and(|d| d.source == DraftSource::OwnHead) {
            self.drafter = match Drafter::from_target(&self.model) {
                Ok(d) => d,
                Err(e) => {
                    eprintln!("famlx: warning: speculative decoding off after the reload: {e:#}");
                    None
                }
            };
        }
        if !kept {
            self.forget();
        }
        Ok(kept)
    }

    /// The checkpoint's tensors that no part of the model reads: neither the
    /// model's build nor the family's own drafter (tried now if none was
    /// built, so an MTP head left off with `--no-mtp` does not count).
    pub fn unused_tensors(&self) -> Vec<String> {
        if self.drafter.is_none() {
            // Only its reads matter: a head that cannot be built was reported where it was asked for.
            let _ = Drafter::from_target(&self.model);
        }
        self.model.weights.unread()
    }
}
