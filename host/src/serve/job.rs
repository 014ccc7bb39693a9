//! A request on its way to the engine and what the engine tells its
//! handler back.

use super::api::{ApiError, JobSpec};
use super::output::Delta;
use super::prepare::Prepared;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc::UnboundedSender;

/// One token's log-probability as the API reports it.
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

/// What the engine tells a request's handler.
#[derive(Debug)]
pub enum Event {
    /// The prompt was accepted (prefill starts).
    Started,
    /// More of the reply.
    Delta {
        /// The text, reasoning and calls it adds.
        delta: Delta,
        /// Log-probabilities of the tokens it came from.
        logprobs: Vec<LogprobEntry>,
    },
    /// The reply is complete.
    Done {
        /// OpenAI's finish_reason.
        finish: &'static str,
        /// Token counts.
        usage: Usage,
    },
    /// The request failed.
    Error(ApiError),
}

/// A request on its way to the engine.
pub struct Job {
    /// The checked request.
    pub spec: JobSpec,
    /// Its id (for the log).
    pub id: String,
    /// Set when the client has gone: the engine stops the request.
    pub cancel: Arc<AtomicBool>,
    /// Where the reply goes.
    pub events: UnboundedSender<Event>,
    /// When the handler received it.
    pub received: Instant,
    /// The request as it came (`true`: a chat completion), which ranks of
    /// a distributed server check again into the same job.
    pub origin: (bool, String),
    /// Its prompt, media and grammar made ready by the HTTP side (none:
    /// the engine prepares it).
    pub prepared: Option<Prepared>,
}
