//! A checked request made into the engine's [`Request`], and the engine's
//! events made into what its handler writes: the reply's text split into
//! content, reasoning and tool calls ([`ReplyText`]), errors as
//! [`ApiError`]s.

use super::api::{self, ApiError, JobSpec, PromptSource};
use super::output::{Delta, ReplyText};
use super::prepare::{Prepared, Preparer};
use super::tools::ToolFormat;
use crate::engine::RequestParams;
use crate::engine::{self, EngineError, ErrorKind, FinishReason, Heard, Listener, LogprobEntry, Request, Usage};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

/// What the engine's events become for a request's handler.
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
        /// Why it ended.
        finish: FinishReason,
        /// Token counts.
        usage: Usage,
    },
    /// The request failed.
    Error(ApiError),
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> ApiError {
        let status = match e.kind {
            ErrorKind::Invalid => 400,
            ErrorKind::TooLong => 413,
            ErrorKind::Internal => 500,
        };
        match e.param {
            Some(p) if status == 400 => ApiError::bad(&p, e.message),
            _ => ApiError::status(status, e.message),
        }
    }
}

/// The request `spec`, `prepared` already, as the engine takes it; its
/// events come out of the receiver. `origin` is the request as it came
/// (`true`: a chat completion, and the body), which the ranks of a split
/// server check again into the same request ([`replay`]).
pub fn request(
    spec: JobSpec,
    prepared: Prepared,
    origin: (bool, String),
    id: String,
    tool_format: Option<ToolFormat>,
) -> (Request, UnboundedReceiver<Event>) {
    let (events, rx) = unbounded_channel();
    let tools = match &spec.prompt {
        PromptSource::Chat { tools: Some(t), .. } => tool_format.map(|f| (f, t.clone())),
        _ => None,
    };
    let echo = match (&spec.prompt, spec.echo) {
        (PromptSource::Text(t), true) => Some(t.clone()),
        _ => None,
    };
    let reply = ReplyText::new(spec.stop.clone(), spec.chat, prepared.in_think, tools);
    let handler = Handler { id: id.clone(), reply, echo, events };
    let params = RequestParams {
        max_tokens: spec.max_tokens,
        sampler: spec.sampler,
        seed: spec.seed,
        logits: spec.logits,
        logprobs: spec.logprobs,
    };
    let request = Request {
        id,
        ids: prepared.ids,
        media: prepared.media,
        constraint: prepared.constraint,
        params,
        cancel: Arc::new(AtomicBool::new(false)),
        received: Instant::now(),
        listener: Box::new(handler),
        origin: serde_json::to_string(&origin).unwrap_or_default(),
    };
    (request, rx)
}

/// Makes a request again from its origin, as rank 0's front end made it:
/// the same check of the same body, the same preparing; its events go
/// nowhere. What ranks other than 0 of a split server run.
pub fn replay(preparer: Arc<Preparer>) -> impl Fn(&str) -> anyhow::Result<Request> {
    move |origin| {
        let (chat, body): (bool, String) = serde_json::from_str(origin)?;
        let check = if chat { api::chat } else { api::completion };
        let spec = check(body.as_bytes()).map_err(|e| anyhow::anyhow!("{}", e.message))?;
        let prepared = preparer.prepare(&spec).map_err(|e| anyhow::anyhow!("{}", e.message))?;
        Ok(request(spec, prepared, (chat, body), String::new(), preparer.tool_format()).0)
    }
}

/// A request's listener: splits the reply's text as it streams and sends
/// the handler what each token adds.
struct Handler {
    id: String,
    reply: ReplyText,
    /// The prompt, sent first when the request asked for it echoed.
    echo: Option<String>,
    events: UnboundedSender<Event>,
}

impl Handler {
    /// Sends `delta` and `logprobs` unless both are empty; false when no one listens.
    fn send(&self, delta: Delta, logprobs: Vec<LogprobEntry>) -> bool {
        (delta.is_empty() && logprobs.is_empty()) || self.events.send(Event::Delta { delta, logprobs }).is_ok()
    }
}

impl Listener for Handler {
    fn hear(&mut self, event: engine::Event) -> Heard {
        let sent = match event {
            engine::Event::Started => {
                let started = self.events.send(Event::Started).is_ok();
                let echo = self.echo.take().map(|t| Delta { content: t, ..Delta::default() });
                started && self.send(echo.unwrap_or_default(), vec![])
            }
            engine::Event::Token { text, logprob, .. } => {
                let delta = text.map(|t| self.reply.push(&t)).unwrap_or_default();
                self.send(delta, logprob.into_iter().collect())
            }
            engine::Event::Rest(text) => {
                let mut tail = self.reply.push(&text);
                tail.append(self.reply.finish());
                for bad in &self.reply.bad_calls {
                    tracing::warn!(target: "famlx::serve", id = %self.id, "tool call returned as text: {bad}");
                }
                self.send(tail, vec![])
            }
            engine::Event::Done { finish, usage } => self.events.send(Event::Done { finish, usage }).is_ok(),
            engine::Event::Failed(e) => self.events.send(Event::Error(e.into())).is_ok(),
        };
        Heard { stop: self.reply.stopped, gone: !sent }
    }
}

/// OpenAI's `finish_reason` for a reply that ended for `finish` after
/// making `calls` tool calls.
pub fn finish_reason(finish: FinishReason, calls: usize) -> &'static str {
    match finish {
        FinishReason::Stop | FinishReason::Length if calls > 0 => "tool_calls",
        f => f.name(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handler(stops: &[&str]) -> (Handler, UnboundedReceiver<Event>) {
        let (events, rx) = unbounded_channel();
        let reply = ReplyText::new(stops.iter().map(|s| s.to_string()).collect(), false, false, None);
        (Handler { id: "t".into(), reply, echo: None, events }, rx)
    }

    fn token(text: &str) -> engine::Event {
        engine::Event::Token { id: 0, text: Some(text.into()), logprob: None }
    }

    #[test]
    fn finish_reasons_are_openai_strings() {
        assert_eq!(finish_reason(FinishReason::Stop, 0), "stop");
        assert_eq!(finish_reason(FinishReason::Length, 0), "length");
        assert_eq!(finish_reason(FinishReason::Cancelled, 0), "cancelled");
        assert_eq!(finish_reason(FinishReason::Stop, 1), "tool_calls");
        assert_eq!(finish_reason(FinishReason::Length, 2), "tool_calls");
        assert_eq!(finish_reason(FinishReason::Cancelled, 1), "cancelled");
    }

    #[test]
    fn engine_errors_keep_their_status_and_field() {
        let bad = ApiError::from(EngineError::invalid("messages[1].content[0]", "not an image"));
        assert_eq!((bad.status, bad.param.as_deref()), (400, Some("messages[1].content[0]")));
        assert_eq!(ApiError::from(EngineError::new(ErrorKind::TooLong, "full")).status, 413);
        assert_eq!(ApiError::from(EngineError::internal("boom")).status, 500);
    }

    #[test]
    fn a_stop_string_across_tokens_stops_the_row() {
        let (mut h, mut rx) = handler(&["END"]);
        assert!(!h.hear(token("one EN")).stop);
        assert!(h.hear(token("D two")).stop);
        let mut text = String::new();
        while let Ok(Event::Delta { delta, .. }) = rx.try_recv() {
            text += &delta.content;
        }
        assert_eq!(text, "one ");
    }

    #[test]
    fn a_listener_whose_client_went_away_says_so() {
        let (mut h, rx) = handler(&[]);
        assert!(!h.hear(token("a")).gone);
        drop(rx);
        assert!(h.hear(token("b")).gone);
        // A hidden token sends nothing, so it cannot tell.
        assert!(!h.hear(engine::Event::Token { id: 1, text: None, logprob: None }).gone);
    }
}
