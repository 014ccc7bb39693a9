//! Admission: a job checked against the model and made into a row's
//! parts (prompt ids and media, caches from the prompt cache, constraint,
//! random key), before it joins the engine's rows.

use super::Engine;
use crate::cache::DraftHit;
use crate::model::Sequence;
use crate::serve::api::{ApiError, PromptSource};
use crate::serve::job::{Event, Job};
use crate::serve::media;
use crate::serve::output::{Delta, ReplyText};
use crate::serve::prepare::Prepared;
use crate::serve::row::Row;
use famlx_text::Tokenizer;
use std::time::Instant;

impl Engine {
    pub(super) fn tokenizer(&self) -> Result<&Tokenizer, ApiError> {
        self.model.tokenizer().map_err(|e| ApiError::status(400, format!("{e:#}")))
    }

    /// A job checked against the model, made into a row's parts: its
    /// prompt ids, its caches (from the prompt cache when a prefix is
    /// there), its constraint and sampler.
    pub(super) fn admit_inner(&mut self, job: &mut Job) -> Result<RowParts, ApiError> {
        // Prepared on the HTTP side; a rank that follows rank 0 prepares here.
        let prepared = match job.prepared.take() {
            Some(p) => p,
            None => self.preparer.prepare(&job.spec)?,
        };
        let spec = &job.spec;
        let Prepared { ids, in_think, media, constraint } = prepared;
        let prompt = media::prompt(&self.model, ids, media)?;
        let ids = prompt.ids.clone();
        let room = self.model.context_room(ids.len()).map_err(|e| ApiError::status(413, format!("{e:#}")))?;
        let mut max = spec.max_tokens.unwrap_or(self.settings.default_max_tokens);
        if let Some(r) = room {
            if r == 0 {
                return Err(ApiError::status(413, "the prompt fills the model's whole context"));
            }
            max = max.min(r);
        }
        let tools = match &spec.prompt {
            PromptSource::Chat { tools: Some(t), .. } => self.tool_format.map(|f| (f, t.clone())),
            _ => None,
        };
        let tok = self.tokenizer()?.clone();
        let cache_key = media::prefix_key(&prompt);
        let (cached, mut seq, draft) = match self.prefix.lookup(&cache_key, self.drafter.is_some()) {
            Some(h) if !media::cuts_item(&prompt, h.tokens) => (h.tokens, self.model.sequence_with(h.caches), h.draft),
            _ => (0, self.model.sequence().map_err(|e| ApiError::status(500, format!("{e:#}")))?, None),
        };
        let key = match spec.seed {
            Some(s) => Some(mlx::random::key(s).map_err(|e| ApiError::status(500, format!("{e:#}")))?),
            None => None,
        };
        seq.media = match prompt.media.is_empty() {
            true => None,
            false => Some(media::embed(&mut self.model, &prompt, cached)?),
        };
        let keep = spec.logits.context_size.max(1);
        let _ = job.events.send(Event::Started);
        if spec.echo {
            if let PromptSource::Text(t) = &spec.prompt {
                let _ = job
                    .events
                    .send(Event::Delta { delta: Delta { content: t.clone(), ..Delta::default() }, logprobs: vec![] });
            }
        }
        Ok(RowParts {
            history: ids[ids.len().saturating_sub(keep)..].to_vec(),
            reply: ReplyText::new(spec.stop.clone(), spec.chat, in_think, tools),
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
    reply: ReplyText,
    detok: famlx_text::StreamingDetokenizer,
    deadline: Option<Instant>,
}

impl RowParts {
    pub(super) fn into_row(self, job: Job, serial: u64) -> Row {
        let spec = &job.spec;
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
            reply: self.reply,
            history: self.history,
            tokens: Vec::new(),
            deadline: self.deadline,
            calls: 0,
            finish: None,
            first_at: None,
            fed_last: false,
            started: Instant::now(),
            halt: None,
            lockstep: false,
            draft: None,
            job,
        }
    }
}
