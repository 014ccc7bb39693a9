//! Admission: a request checked against the model and made into a row's
//! parts (prompt ids and media, caches from the prompt cache, constraint,
//! random key), before it joins the engine's rows.

use super::media;
use super::request::{EngineError, ErrorKind, Event, Request};
use super::row::Row;
use super::Engine;
use crate::cache::DraftHit;
use crate::model::Sequence;
use famlx_text::Tokenizer;
use std::time::Instant;

impl Engine {
    fn tokenizer(&self) -> Result<&Tokenizer, EngineError> {
        self.model.tokenizer().map_err(|e| EngineError::new(ErrorKind::Invalid, format!("{e:#}")))
    }

    /// A request checked against the model, made into a row's parts: its
    /// prompt ids, its caches (from the prompt cache when a prefix is
    /// there), its constraint and sampler.
    pub(super) fn admit_inner(&mut self, job: &mut Request) -> Result<RowParts, EngineError> {
        let (ids, media) = (std::mem::take(&mut job.ids), std::mem::take(&mut job.media));
        let constraint = job.constraint.take();
        let spec = &job.params;
        let prompt = media::prompt(&self.model, ids, media)?;
        let ids = prompt.ids.clone();
        let too_long = |m: String| EngineError::new(ErrorKind::TooLong, m);
        let room = self.model.context_room(ids.len()).map_err(|e| too_long(format!("{e:#}")))?;
        let mut max = spec.max_tokens.unwrap_or(self.settings.default_max_tokens);
        if let Some(r) = room {
            if r == 0 {
                return Err(too_long("the prompt fills the model's whole context".into()));
            }
            max = max.min(r);
        }
        let tok = self.tokenizer()?.clone();
        let cache_key = media::prefix_key(&prompt);
        let (cached, mut seq, draft) = match self.prefix.lookup(&cache_key, self.drafter.is_some()) {
            Some(h) if !media::cuts_item(&prompt, h.tokens) => (h.tokens, self.model.sequence_with(h.caches), h.draft),
            _ => (0, self.model.sequence().map_err(|e| EngineError::internal(format!("{e:#}")))?, None),
        };
        seq.set_ids(cache_key[..cached].to_vec());
        let key = match spec.seed {
            Some(s) => Some(mlx::random::key(s).map_err(|e| EngineError::internal(format!("{e:#}")))?),
            None => None,
        };
        seq.media = match prompt.media.is_empty() {
            true => None,
            false => Some(media::embed(&mut self.model, &prompt, cached)?),
        };
        let keep = spec.logits.context_size.max(1);
        job.listener.hear(Event::Started);
        Ok(RowParts {
            history: ids[ids.len().saturating_sub(keep)..].to_vec(),
            detok: tok.detokenizer_with(false),
            ids,
            cache_key,
            seq,
            cached,
            draft,
            max,
            constraint,
            key,
            deadline: self.settings.timeout.map(|t| job.received + t),
        })
    }
}

/// A row's parts, made before the job moves in.
pub(super) struct RowParts {
    ids: Vec<u32>,
    cache_key: Vec<u32>,
    seq: Sequence,
    cached: usize,
    /// The drafter's state for the cached tokens, from the prompt cache.
    pub(super) draft: Option<DraftHit>,
    max: usize,
    constraint: Option<crate::grammar::GrammarConstraint>,
    key: Option<mlx::Array>,
    history: Vec<u32>,
    detok: famlx_text::StreamingDetokenizer,
    deadline: Option<Instant>,
}

impl RowParts {
    pub(super) fn into_row(self, job: Request, serial: u64) -> Row {
        let spec = &job.params;
        Row {
            serial,
            sampler: spec.sampler.clone(),
            logits: spec.logits.clone(),
            logprobs: spec.logprobs,
            ids: self.ids,
            cache_key: self.cache_key,
            seq: self.seq,
            fed: self.cached,
            cached: self.cached,
            max_tokens: self.max,
            constraint: self.constraint,
            allowed: None,
            key: self.key,
            detok: self.detok,
            history: self.history,
            tokens: Vec::new(),
            deadline: self.deadline,
            finish: None,
            first_at: None,
            fed_last: false,
            started: Instant::now(),
            halt: None,
            lockstep: false,
            job,
        }
    }
}
