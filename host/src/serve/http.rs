//! The HTTP side: routes, the API key, the queue in front of the engine,
//! and the reply in OpenAI's shapes, whole or as server-sent events.

use super::api::{self, ApiError, JobSpec};
use super::job::{self, finish_reason, Event};
use super::limits::Limits;
use super::output::Delta;
use super::prepare::{Prepared, Preparer};
use super::tools::ToolCall;
use crate::engine::{LogprobEntry, Metrics, Request as EngineRequest, Usage};
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::StreamExt;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// What the handlers share.
pub struct AppState {
    /// The engine's queue.
    pub queue: SyncSender<EngineRequest>,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// Names the model answers to; the first is the one reported.
    pub model_ids: Vec<String>,
    /// Required bearer token.
    pub api_key: Option<String>,
    /// Server start (the model's `created`).
    pub created: u64,
    /// Makes requests ready for the engine, under the server's limits.
    preparer: Arc<Preparer>,
    /// Request bodies held at once, in KiB (`max_pending_bytes`).
    pending: Arc<Semaphore>,
    /// Requests being checked and prepared at once.
    preparing: Arc<Semaphore>,
}

impl AppState {
    /// The handlers' state: the engine's `queue`, and `preparer` with the
    /// limits every request is held to.
    pub fn new(
        queue: SyncSender<EngineRequest>,
        metrics: Arc<Metrics>,
        model_ids: Vec<String>,
        api_key: Option<String>,
        preparer: Arc<Preparer>,
    ) -> AppState {
        let l = preparer.limits();
        let pending = Arc::new(Semaphore::new(kib(l.max_pending_bytes).min(Semaphore::MAX_PERMITS)));
        let preparing = Arc::new(Semaphore::new(l.prepare_concurrency.max(1)));
        let created = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        AppState { queue, metrics, model_ids, api_key, created, preparer, pending, preparing }
    }

    fn limits(&self) -> &Limits {
        self.preparer.limits()
    }
}

/// Bytes in whole KiB, rounded up (the pending-bytes budget's unit).
fn kib(bytes: usize) -> usize {
    bytes.div_ceil(1024).max(1)
}

type Shared = Arc<AppState>;

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut r = (status, Json(self.body())).into_response();
        if self.status == 503 || self.status == 429 {
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        r
    }
}

/// The router.
pub fn router(state: Shared) -> Router {
    let api = Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .route("/chat/completions", post(chat))
        .route("/completions", post(completions))
        .route("/models", get(models))
        .route("/metrics", get(metrics))
        .route_layer(middleware::from_fn_with_state(state.clone(), auth));
    Router::new()
        .route("/health", get(|| async { Json(json!({"status": "ok"})) }))
        .merge(api)
        .fallback(|| async { ApiError::status(404, "no such route") })
        .with_state(state)
}

async fn auth(State(st): State<Shared>, req: Request, next: Next) -> Response {
    if let Some(key) = &st.api_key {
        let given = req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        if given.and_then(|g| g.strip_prefix("Bearer ")) != Some(key.as_str()) {
            st.metrics.rejected.fetch_add(1, Ordering::SeqCst);
            return ApiError::status(401, "missing or wrong API key (Authorization: Bearer ...)").into_response();
        }
    }
    next.run(req).await
}

fn too_big(max: usize) -> ApiError {
    ApiError::status(
        413,
        format!("the request body is over the {} MiB this server takes (--max-body-bytes)", max >> 20),
    )
}

/// A request's body, read within the server's bounds: a body declared or
/// found over `max_body_bytes` is 413 (a declared one before any of it is
/// read), one that does not arrive within `body_timeout` is 408, and one
/// that would take the bytes held by all requests past
/// `max_pending_bytes` is 503. The permit holds its share of that budget.
async fn read_body(st: &Shared, req: Request) -> Result<(Bytes, OwnedSemaphorePermit), ApiError> {
    let l = st.limits();
    let declared = req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > l.max_body_bytes as u64) {
        return Err(too_big(l.max_body_bytes));
    }
    // A body of unknown length may grow to the largest taken.
    let want = declared.map_or(l.max_body_bytes, |n| n as usize);
    let permits = u32::try_from(kib(want)).unwrap_or(u32::MAX);
    let hold = st.pending.clone().try_acquire_many_owned(permits).map_err(|_| {
        ApiError::status(
            503,
            "the server is busy: it holds as many request bytes as it takes (--max-pending-bytes); retry shortly",
        )
    })?;
    let mut stream = req.into_body().into_data_stream();
    let mut body = Vec::with_capacity(want.min(1 << 20));
    let read = async {
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| ApiError::status(400, format!("the request body could not be read: {e}")))?;
            if body.len() + chunk.len() > l.max_body_bytes {
                return Err(too_big(l.max_body_bytes));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(())
    };
    match tokio::time::timeout(l.body_timeout, read).await {
        Ok(Ok(())) => Ok((Bytes::from(body), hold)),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(ApiError::status(
            408,
            format!("the request body did not arrive within {} s (--body-timeout)", l.body_timeout.as_secs()),
        )),
    }
}

async fn metrics(State(st): State<Shared>) -> Response {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], st.metrics.render()).into_response()
}

async fn models(State(st): State<Shared>) -> Json<Value> {
    Json(json!({"object": "list", "data": [
        {"id": st.model_ids[0], "object": "model", "created": st.created, "owned_by": "famlx"}
    ]}))
}

async fn chat(State(st): State<Shared>, req: Request) -> Response {
    handle(st, req, true, "chatcmpl").await
}

async fn completions(State(st): State<Shared>, req: Request) -> Response {
    handle(st, req, false, "cmpl").await
}

fn new_id(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let t = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{prefix}-{:x}{:04x}", t & 0xffff_ffff_ffff, N.fetch_add(1, Ordering::SeqCst) & 0xffff)
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Sets the job's cancel flag when dropped: the client went away (or the reply is complete).
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// The checked request, made ready for the engine, with the text it
/// came as (for the ranks of a split server).
type Checked = (JobSpec, Prepared, String);

/// Checks and prepares a body on a blocking thread (parsing, templates,
/// tokenizing, media decoding and grammar compiling take time in
/// proportion to what the client sent), at most `prepare_concurrency` at once.
async fn check_and_prepare(st: &Shared, body: Bytes, chat: bool) -> Result<Checked, ApiError> {
    let _turn =
        st.preparing.clone().acquire_owned().await.map_err(|_| ApiError::status(503, "the server is shutting down"))?;
    let st2 = st.clone();
    let work = tokio::task::spawn_blocking(move || {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if let Some(m) = api::requested_model(&body) {
                if !m.is_empty() && !st2.model_ids.contains(&m) {
                    return Err(ApiError {
                        status: 404,
                        message: format!("model {m:?} is not served here (this server serves {:?})", st2.model_ids[0]),
                        param: Some("model".into()),
                    });
                }
            }
            let spec = if chat { api::chat(&body) } else { api::completion(&body) }?;
            let prepared = st2.preparer.prepare(&spec)?;
            Ok((spec, prepared, String::from_utf8_lossy(&body).into_owned()))
        }))
        .unwrap_or_else(|_| Err(ApiError::status(500, "internal error while checking the request")))
    });
    work.await.unwrap_or_else(|_| Err(ApiError::status(500, "internal error while checking the request")))
}

async fn handle(st: Shared, req: Request, chat: bool, kind: &str) -> Response {
    let refuse = |e: ApiError| {
        st.metrics.rejected.fetch_add(1, Ordering::SeqCst);
        e.into_response()
    };
    let (body, hold) = match read_body(&st, req).await {
        Ok(b) => b,
        Err(e) => return refuse(e),
    };
    let (spec, prepared, origin) = match check_and_prepare(&st, body, chat).await {
        Ok(c) => c,
        Err(e) => return refuse(e),
    };
    drop(hold);
    let id = new_id(kind);
    let (stream_opts, chat_reply) = ((spec.stream, spec.include_usage, spec.logprobs.is_some()), spec.chat);
    let (job, mut rx) = job::request(spec, prepared, (chat, origin), id.clone(), st.preparer.tool_format());
    let guard = CancelOnDrop(job.cancel.clone());
    st.metrics.queue_depth.fetch_add(1, Ordering::SeqCst);
    match st.queue.try_send(job) {
        Ok(()) => {}
        Err(e) => {
            st.metrics.queue_depth.fetch_sub(1, Ordering::SeqCst);
            let why = match e {
                TrySendError::Full(_) => "the server is busy: the request queue is full; retry shortly",
                TrySendError::Disconnected(_) => "the server is shutting down",
            };
            return refuse(ApiError::status(503, why));
        }
    }
    st.metrics.requests.fetch_add(1, Ordering::SeqCst);
    // The first event says whether the prompt was accepted: errors keep their status.
    match rx.recv().await {
        Some(Event::Started) => {}
        Some(Event::Error(e)) => return e.into_response(),
        _ => return ApiError::status(500, "the engine stopped").into_response(),
    }
    let reply = Reply { id, model: st.model_ids[0].clone(), created: now(), chat: chat_reply, calls: 0 };
    let (stream, include_usage, want_lp) = stream_opts;
    if stream {
        sse(reply, rx, guard, include_usage, want_lp)
    } else {
        whole(reply, rx, guard, want_lp).await
    }
}

/// One reply's identity and call count.
struct Reply {
    id: String,
    model: String,
    created: u64,
    chat: bool,
    calls: usize,
}

fn call_json(c: &ToolCall, index: Option<usize>) -> Value {
    let mut v =
        json!({"id": new_id("call"), "type": "function", "function": {"name": c.name, "arguments": c.arguments}});
    if let Some(i) = index {
        v["index"] = i.into();
    }
    v
}

fn usage_json(u: &Usage) -> Value {
    json!({"prompt_tokens": u.prompt, "completion_tokens": u.completion, "total_tokens": u.prompt + u.completion,
           "prompt_tokens_details": {"cached_tokens": u.cached}})
}

/// Chat log-probabilities: `{"content": [{token, logprob, bytes, top_logprobs}]}`.
fn chat_logprobs(l: &[LogprobEntry]) -> Value {
    let e = |t: &str, lp: f32| json!({"token": t, "logprob": lp, "bytes": t.as_bytes()});
    json!({"content": l.iter().map(|x| {
        let mut v = e(&x.token, x.logprob);
        v["top_logprobs"] = x.top.iter().map(|(t, lp)| e(t, *lp)).collect();
        v
    }).collect::<Vec<_>>()})
}

/// Completion log-probabilities (the legacy shape).
fn text_logprobs(l: &[LogprobEntry], offset: usize) -> Value {
    let mut at = offset;
    let mut offsets = Vec::new();
    for x in l {
        offsets.push(at);
        at += x.token.len();
    }
    json!({
        "tokens": l.iter().map(|x| x.token.clone()).collect::<Vec<_>>(),
        "token_logprobs": l.iter().map(|x| x.logprob).collect::<Vec<_>>(),
        "top_logprobs": l.iter().map(|x| x.top.iter().map(|(t, lp)| (t.clone(), json!(lp))).collect::<serde_json::Map<_, _>>()).collect::<Vec<_>>(),
        "text_offset": offsets,
    })
}

async fn whole(mut r: Reply, mut rx: UnboundedReceiver<Event>, guard: CancelOnDrop, want_lp: bool) -> Response {
    let mut all = Delta::default();
    let mut lps = Vec::new();
    let (finish, usage) = loop {
        match rx.recv().await {
            Some(Event::Delta { delta, logprobs }) => {
                all.append(delta);
                lps.extend(logprobs);
            }
            Some(Event::Done { finish, usage }) => break (finish, usage),
            Some(Event::Error(e)) => return e.into_response(),
            Some(Event::Started) => {}
            None => return ApiError::status(500, "the engine stopped").into_response(),
        }
    };
    drop(guard);
    r.calls = all.tool_calls.len();
    let finish = finish_reason(finish, r.calls);
    let choice = if r.chat {
        let mut msg = json!({"role": "assistant", "content": all.content});
        if !all.reasoning.is_empty() {
            msg["reasoning_content"] = all.reasoning.into();
        }
        if r.calls > 0 {
            msg["tool_calls"] = all.tool_calls.iter().map(|c| call_json(c, None)).collect();
            if msg["content"].as_str() == Some("") {
                msg["content"] = Value::Null;
            }
        }
        json!({"index": 0, "message": msg, "finish_reason": finish,
               "logprobs": if want_lp { chat_logprobs(&lps) } else { Value::Null }})
    } else {
        json!({"index": 0, "text": all.content, "finish_reason": finish,
               "logprobs": if want_lp { text_logprobs(&lps, 0) } else { Value::Null }})
    };
    let object = if r.chat { "chat.completion" } else { "text_completion" };
    Json(json!({"id": r.id, "object": object, "created": r.created, "model": r.model,
                "choices": [choice], "usage": usage_json(&usage)}))
    .into_response()
}

impl Reply {
    /// One stream chunk around a choice.
    fn chunk(&self, choice: Value, usage: Option<Value>) -> SseEvent {
        let object = if self.chat { "chat.completion.chunk" } else { "text_completion" };
        let mut v = json!({"id": self.id, "object": object, "created": self.created, "model": self.model,
                           "choices": if choice.is_null() { json!([]) } else { json!([choice]) }});
        if let Some(u) = usage {
            v["usage"] = u;
        }
        SseEvent::default().data(v.to_string())
    }

    fn delta_choice(&mut self, d: Delta, lps: &[LogprobEntry], want_lp: bool, first: bool) -> Value {
        let lp = if !want_lp {
            Value::Null
        } else if self.chat {
            chat_logprobs(lps)
        } else {
            text_logprobs(lps, 0)
        };
        if !self.chat {
            return json!({"index": 0, "text": d.content, "finish_reason": Value::Null, "logprobs": lp});
        }
        let mut delta = json!({});
        if first {
            delta["role"] = "assistant".into();
        }
        if !d.content.is_empty() || first {
            delta["content"] = d.content.into();
        }
        if !d.reasoning.is_empty() {
            delta["reasoning_content"] = d.reasoning.into();
        }
        if !d.tool_calls.is_empty() {
            let calls: Vec<Value> =
                d.tool_calls.iter().enumerate().map(|(i, c)| call_json(c, Some(self.calls + i))).collect();
            self.calls += calls.len();
            delta["tool_calls"] = calls.into();
        }
        json!({"index": 0, "delta": delta, "finish_reason": Value::Null, "logprobs": lp})
    }
}

fn sse(r: Reply, rx: UnboundedReceiver<Event>, guard: CancelOnDrop, include_usage: bool, want_lp: bool) -> Response {
    struct St {
        r: Reply,
        rx: UnboundedReceiver<Event>,
        _guard: CancelOnDrop,
        first: bool,
        pending: Vec<SseEvent>,
        done: bool,
    }
    let st = St { r, rx, _guard: guard, first: true, pending: Vec::new(), done: false };
    let stream = futures_util::stream::unfold(st, move |mut s| async move {
        loop {
            if let Some(e) = s.pending.pop() {
                return Some((Ok::<_, Infallible>(e), s));
            }
            if s.done {
                return None;
            }
            let mut out = Vec::new();
            match s.rx.recv().await {
                Some(Event::Delta { delta, logprobs }) => {
                    let c = s.r.delta_choice(delta, &logprobs, want_lp, s.first);
                    s.first = false;
                    out.push(s.r.chunk(c, None));
                }
                Some(Event::Done { finish, usage }) => {
                    if s.first && s.r.chat {
                        let c = s.r.delta_choice(Delta::default(), &[], false, true);
                        out.push(s.r.chunk(c, None));
                    }
                    let finish = finish_reason(finish, s.r.calls);
                    let end = if s.r.chat {
                        json!({"index": 0, "delta": {}, "finish_reason": finish, "logprobs": Value::Null})
                    } else {
                        json!({"index": 0, "text": "", "finish_reason": finish, "logprobs": Value::Null})
                    };
                    out.push(s.r.chunk(end, None));
                    if include_usage {
                        out.push(s.r.chunk(Value::Null, Some(usage_json(&usage))));
                    }
                    out.push(SseEvent::default().data("[DONE]"));
                    s.done = true;
                }
                Some(Event::Error(e)) => {
                    out.push(SseEvent::default().data(e.body().to_string()));
                    s.done = true;
                }
                Some(Event::Started) => {}
                None => return None,
            }
            out.reverse();
            s.pending = out;
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(10)).text("keep-alive")).into_response()
}
