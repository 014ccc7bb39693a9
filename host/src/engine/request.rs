//! A request as the engine takes it (token ids, decoded media, a compiled
//! constraint, sampling settings) and the events it sends back to whoever
//! listens: token ids with their text, the finish reason, token counts.
//! Nothing here knows HTTP or OpenAI; a front end maps its own requests
//! and replies onto these.

use crate::decode::{FinishReason, LogitsParams};
use crate::grammar::GrammarConstraint;
use crate::prompt::Decoded;
use crate::sample::SamplerParams;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

/// An image or clip of a request, decoded (the engine runs the family's
/// processor and tower on it).
pub struct DecodedPart {
    /// The pixels or samples.
    pub decoded: Decoded,
    /// Where it sits in the request, for errors.
    pub param: String,
}

/// How one request samples and how long it may run.
#[derive(Debug, Clone, Default)]
pub struct RequestParams {
    /// Most tokens to generate (`None`: up to the context or the engine's default).
    pub max_tokens: Option<usize>,
    /// Sampling.
    pub sampler: SamplerParams,
    /// Seed for this request's own random stream.
    pub seed: Option<u64>,
    /// Bias and penalties.
    pub logits: LogitsParams,
    /// Log-probabilities: alternatives per token.
    pub logprobs: Option<usize>,
}

/// A request on its way to the engine.
pub struct Request {
    /// Its id (for the log).
    pub id: String,
    /// The prompt's token ids (one marker per image or clip, not expanded yet).
    pub ids: Vec<u32>,
    /// The images and clips, decoded, in prompt order.
    pub media: Vec<DecodedPart>,
    /// The output constraint, compiled.
    pub constraint: Option<GrammarConstraint>,
    /// Sampling and length.
    pub params: RequestParams,
    /// Set when no one waits for the reply any more: the engine stops it.
    pub cancel: Arc<AtomicBool>,
    /// When the front end received it (queueing time and the deadline count from here).
    pub received: Instant,
    /// Where the request's events go.
    pub listener: Box<dyn Listener>,
    /// The request as the front end can make it again: the ranks of a
    /// split server get this text and the front end's replay rebuilds it.
    pub origin: String,
}

/// One token's log-probability, with the token's text.
#[derive(Debug, Clone)]
pub struct LogprobEntry {
    /// The token's text.
    pub token: String,
    /// Its log-probability.
    pub logprob: f32,
    /// Alternatives: text and log-probability, most likely first.
    pub top: Vec<(String, f32)>,
}

/// Token counts of a finished request.
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt: usize,
    /// Of those, reused from the cache.
    pub cached: usize,
    /// Generated tokens.
    pub completion: usize,
}

/// What the engine tells a request's listener, in order: `Started` (or
/// `Failed`), a `Token` per token drawn, the `Rest` of the text, `Done`.
#[derive(Debug)]
pub enum Event {
    /// The prompt was accepted (prefill starts).
    Started,
    /// A token drawn.
    Token {
        /// Its id.
        id: u32,
        /// The text it adds (none for a special token whose text is not
        /// shown; it may be empty while the detokenizer waits for more bytes).
        text: Option<String>,
        /// Its log-probability, when the request asked.
        logprob: Option<LogprobEntry>,
    },
    /// The text the detokenizer still held when the reply ended.
    Rest(String),
    /// The reply is complete.
    Done {
        /// Why it ended.
        finish: FinishReason,
        /// Token counts.
        usage: Usage,
    },
    /// The request failed.
    Failed(EngineError),
}

/// What a listener answers an event with.
#[derive(Debug, Clone, Copy, Default)]
pub struct Heard {
    /// The text so far reached one of the request's stops (a front end's
    /// stop strings): the reply ends at this token.
    pub stop: bool,
    /// No one listens any more: the engine stops the request.
    pub gone: bool,
}

/// Takes a request's events (on the engine thread: keep it quick).
pub trait Listener: Send {
    /// Takes one event.
    fn hear(&mut self, event: Event) -> Heard;
}

/// What kind of failure an [`EngineError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request does not suit the model (its media, no tokenizer).
    Invalid,
    /// The prompt leaves no room in the model's context.
    TooLong,
    /// The engine failed while running it.
    Internal,
}

/// Why the engine refused or failed a request.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineError {
    /// What kind of failure.
    pub kind: ErrorKind,
    /// What went wrong.
    pub message: String,
    /// The part of the request at fault, when one is.
    pub param: Option<String>,
}

impl EngineError {
    /// A failure of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> EngineError {
        EngineError { kind, message: message.into(), param: None }
    }

    /// The request's part `param` does not suit the model.
    pub fn invalid(param: &str, message: impl Into<String>) -> EngineError {
        EngineError { kind: ErrorKind::Invalid, message: message.into(), param: Some(param.into()) }
    }

    /// The engine failed.
    pub fn internal(message: impl Into<String>) -> EngineError {
        EngineError::new(ErrorKind::Internal, message)
    }
}
