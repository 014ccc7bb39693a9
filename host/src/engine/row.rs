//! One request in the batch: its prompt and sequence, its sampler and
//! constraint, and the tokens it has drawn so far.

use super::request::{Event, LogprobEntry, Request};
use crate::decode::{logprob_of, mask_logits, FinishReason, LogitsParams, TokenLogprob};
use crate::grammar::GrammarConstraint;
use crate::model::Sequence;
use crate::sample::{sample_keyed, SamplerParams};
use anyhow::Result;
use famlx_text::{StreamingDetokenizer, Tokenizer};
use mlx::Array;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// A request being prefilled or decoded.
pub struct Row {
    /// Its id in the batch.
    pub serial: u64,
    /// The request.
    pub job: Request,
    /// Its prompt ids.
    pub ids: Vec<u32>,
    /// The ids the prompt cache knows it by (each image's or clip's
    /// placeholders made its own: [`super::media::prefix_key`]).
    pub cache_key: Vec<u32>,
    /// Its own sequence: caches and the ids they hold (by `cache_key`),
    /// images and clips, drafter caches and what its drafter replays
    /// while it may speculate (see the engine).
    pub seq: Sequence,
    /// Prompt tokens in the caches so far.
    pub fed: usize,
    /// Of those, how many came from the prompt cache.
    pub cached: usize,
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// Sampling.
    pub sampler: SamplerParams,
    /// Bias and penalties.
    pub logits: LogitsParams,
    /// Alternatives per token for logprobs.
    pub logprobs: Option<usize>,
    /// The grammar, if constrained.
    pub constraint: Option<GrammarConstraint>,
    /// The constraint's mask for the next token.
    pub allowed: Option<Vec<u32>>,
    /// The row's own random stream (a seeded request).
    pub key: Option<Array>,
    /// Text so far.
    pub detok: StreamingDetokenizer,
    /// Recent tokens (prompt tail and output) for the penalties.
    pub history: Vec<u32>,
    /// Generated tokens.
    pub tokens: Vec<u32>,
    /// When the request must end.
    pub deadline: Option<Instant>,
    /// Why it ended, once it has.
    pub finish: Option<FinishReason>,
    /// When its first token came.
    pub first_at: Option<Instant>,
    /// The last token was fed into the caches too (a pipelined step had
    /// queued it before the row ended).
    pub fed_last: bool,
    /// When the engine took it.
    pub started: Instant,
    /// Why the engine ends it at its next token, decided at the start of a
    /// turn (cancelled, or past its deadline).
    pub halt: Option<FinishReason>,
    /// Ranks of a distributed server run this row in lockstep: it ends
    /// only by its tokens or by `halt`, never by a clock or flag read
    /// mid-turn, which the ranks would read differently.
    pub lockstep: bool,
}

/// What a row needs from the engine to turn a token into text.
pub struct Vocab<'a> {
    /// The tokenizer.
    pub tok: &'a Tokenizer,
    /// Ids that end generation.
    pub stop_ids: &'a [u32],
    /// Special tokens whose text is kept (reasoning and tool-call markers).
    pub markers: &'a [u32],
}

impl Row {
    /// What its rotary positions add to its cache offset once decoding
    /// (past images a family places in 2-D).
    pub fn shift(&self) -> i64 {
        self.seq.media.as_ref().map_or(0, |m| m.delta)
    }

    /// Computes the constraint's mask for the next token (host work, done
    /// while the device runs the step's forward).
    pub fn prepare_mask(&mut self) -> Result<()> {
        self.allowed = match self.constraint.as_mut() {
            Some(c) => Some(c.allowed()?),
            None => None,
        };
        Ok(())
    }

    /// The next token drawn from `logits` (`[1, V]`, lazy): processed,
    /// masked, sampled from the row's own stream when seeded; with its
    /// log-probability when asked.
    pub fn sample(&mut self, logits: &Array) -> Result<(Array, Option<TokenLogprob>)> {
        let mut l = logits.clone();
        if !self.logits.is_off() {
            l = self.logits.apply(&l, &self.history)?;
        }
        if let Some(a) = &self.allowed {
            l = mask_logits(&l, a)?;
        }
        let key = match &mut self.key {
            Some(k) => {
                let ks = mlx::random::split(k, 2)?;
                let shape = k.shape().to_vec();
                *k = ks.slice_axis(0, 0, 1)?.reshape(&shape)?;
                Some(ks.slice_axis(0, 1, 2)?.reshape(&shape)?)
            }
            None => None,
        };
        let y = sample_keyed(&l, &self.sampler, key.as_ref())?;
        let lp = match self.logprobs {
            Some(k) => Some(logprob_of(&l, &y, k)?),
            None => None,
        };
        Ok((y, lp))
    }

    /// Takes in the token drawn: the constraint advances, the token and
    /// the text it adds go to the listener; sets [`Row::finish`] when the
    /// reply ends here.
    pub fn emit(&mut self, token: u32, lp: Option<TokenLogprob>, v: &Vocab<'_>) {
        self.first_at.get_or_insert_with(Instant::now);
        self.tokens.push(token);
        self.history.push(token);
        let keep = self.logits.context_size.max(1);
        if self.history.len() > 2 * keep {
            self.history.drain(..self.history.len() - keep);
        }
        if let Some(c) = self.constraint.as_mut() {
            if let Err(e) = c.accept(token) {
                tracing::warn!(target: "famlx::serve", id = %self.job.id, "constraint: {e:#}");
                self.finish = Some(FinishReason::Stop);
                return;
            }
        }
        if v.stop_ids.contains(&token) {
            self.finish = Some(FinishReason::Stop);
            return;
        }
        let shown = !v.tok.is_special(token) || v.markers.contains(&token);
        let text = shown.then(|| self.detok.push(token));
        let logprob = lp.map(|lp| LogprobEntry {
            token: v.tok.decode(&[token], false).unwrap_or_default(),
            logprob: lp.logprob,
            top: lp.top.iter().map(|(id, l)| (v.tok.decode(&[*id], false).unwrap_or_default(), *l)).collect(),
        });
        let heard = self.job.listener.hear(Event::Token { id: token, text, logprob });
        if heard.gone {
            self.job.cancel.store(true, Ordering::SeqCst);
        }
        let live = !self.lockstep;
        self.finish = if let Some(h) = self.halt {
            Some(h)
        } else if live && self.job.cancel.load(Ordering::SeqCst) {
            Some(FinishReason::Cancelled)
        } else if heard.stop || self.constraint.as_mut().is_some_and(|c| c.is_done()) {
            Some(FinishReason::Stop)
        } else if self.tokens.len() >= self.max_tokens || (live && self.deadline.is_some_and(|d| Instant::now() > d)) {
            Some(FinishReason::Length)
        } else {
            None
        };
    }

    /// The end of the reply: the text the detokenizer held back goes to
    /// the listener; the finish reason.
    pub fn close(&mut self) -> FinishReason {
        let rest = self.detok.finish();
        self.job.listener.hear(Event::Rest(rest));
        self.finish.unwrap_or(FinishReason::Stop)
    }

    /// Generated tokens, stop tokens left out.
    pub fn completion_tokens(&self, stop_ids: &[u32]) -> usize {
        self.tokens.iter().filter(|t| !stop_ids.contains(t)).count()
    }

    /// Records in its sequence the generated tokens its caches took, once
    /// it has ended (the last drawn token only when a pipelined step fed
    /// it).
    pub fn record_output(&mut self) {
        let fed = match self.tokens.split_last() {
            Some((_, fed)) if !self.fed_last => fed,
            _ => &self.tokens[..],
        };
        self.seq.push_ids(fed);
    }
}
