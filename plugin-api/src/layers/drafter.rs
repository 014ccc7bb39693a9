//! A separate small language model drafting for a target of the same
//! vocabulary (speculative decoding with `--draft-model`).

use crate::family::Caches;
use mlx::{Array, Error, Result};

/// A small language model of the target's vocabulary drafting for it (what
/// mlx-lm's `--draft-model` does): it ignores the target's hidden states and
/// runs over its own caches, reading the prompt's first token in `begin`
/// and every later one from the steps, so it sees the whole sequence.
pub struct LmDrafter {
    model: Box<dyn crate::family::Model>,
    kinds: Vec<crate::CacheKind>,
}

impl LmDrafter {
    /// A drafter from a model built for the draft checkpoint and its plan's caches.
    pub fn new(model: Box<dyn crate::family::Model>, plan: &crate::ModelPlan) -> Self {
        LmDrafter { model, kinds: plan.caches.iter().cloned().collect() }
    }

    /// Builds one with `build` for a separate draft checkpoint; `None` when
    /// asked for the target's own draft head, which a plain LM has not.
    pub fn for_separate_checkpoint(
        role: crate::DraftRole,
        plan: &crate::ModelPlan,
        build: impl FnOnce() -> Result<Box<dyn crate::family::Model>>,
    ) -> Result<Option<Box<dyn crate::family::Drafter>>> {
        if role == crate::DraftRole::OwnHead {
            return Ok(None);
        }
        Ok(Some(Box::new(LmDrafter::new(build()?, plan))))
    }
}

impl crate::family::Drafter for LmDrafter {
    fn cache_kinds(&self) -> Vec<crate::CacheKind> {
        self.kinds.clone()
    }
    fn begin(&mut self, first_token: u32, own: &mut Caches<'_>) -> Result<u32> {
        let tokens = Array::from_slice(&[first_token as i32], &[1, 1])?;
        // mlx-lm's draft model reads every id as text, as a generated one.
        let input =
            crate::family::Input::tokens(tokens, crate::LogitsWanted::None).from_source(crate::TokenSource::Generated);
        self.model.forward(&input, own)?;
        Ok(1)
    }
    fn step(
        &mut self,
        _hidden: &Array,
        tokens: &Array,
        _target: &mut Caches<'_>,
        own: &mut Caches<'_>,
    ) -> Result<(Array, Array)> {
        let input = crate::family::Input::tokens(tokens.clone(), crate::LogitsWanted::Last)
            .from_source(crate::TokenSource::Generated);
        let out = self.model.forward(&input, own)?;
        let logits = out.logits.ok_or_else(|| Error::msg("draft model returned no logits"))?;
        // No hidden state to chain: the next step only needs the token.
        Ok((logits, mlx::zeros(&[1, 1, 1], mlx::Dtype::F32)?))
    }
}
