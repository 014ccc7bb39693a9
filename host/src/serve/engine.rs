//! The engine thread: it alone touches MLX. It owns the session (model,
//! caches, drafter), takes jobs from a bounded queue one at a time, reuses
//! the cached prefix of the previous request, and streams each job's
//! reply back as [`Event`]s.

use super::api::{ApiError, JobSpec, PromptSource};
use super::metrics::Metrics;
use super::output::{Delta, ReplyText, THINK};
use super::tools::{call_grammar, ToolChoice, ToolFormat, GEMMA_QUOTE};
use crate::decode::{Finish, GenParams, GenStats, Interrupted, Step};
use crate::grammar::{Grammar, Grammars};
use crate::prompt::{render_chat, Prompt};
use crate::session::Session;
use famlx_text::Tokenizer;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
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
}

/// Server-wide settings the engine applies to every job.
#[derive(Debug, Clone)]
pub struct EngineSettings {
    /// `max_tokens` when a request gives none.
    pub default_max_tokens: usize,
    /// Longest a request may run.
    pub timeout: Option<Duration>,
}

/// The engine's state.
pub struct Engine {
    session: Session,
    base: GenParams,
    settings: EngineSettings,
    grammars: Option<Result<Grammars, String>>,
    tool_format: Option<ToolFormat>,
    /// Special tokens whose text the reply keeps: reasoning and tool-call
    /// markers (other special tokens are left out, as `famlx generate` does).
    markers: Vec<u32>,
    metrics: Arc<Metrics>,
}

impl Engine {
    /// An engine over a loaded session; `base` carries the stop ids and prefill step.
    pub fn new(session: Session, base: GenParams, settings: EngineSettings, metrics: Arc<Metrics>) -> Engine {
        let tok = session.model.tokenizer.as_ref();
        let tool_format = tok.and_then(|t| t.chat_template()).and_then(ToolFormat::detect);
        let mut names: Vec<&str> = THINK.iter().flat_map(|(s, e)| [*s, *e]).collect();
        names.extend(tool_format.and_then(|f| f.markers()).map(|(s, e)| [s, e]).into_iter().flatten());
        names.push(GEMMA_QUOTE);
        let markers = names.iter().filter_map(|n| tok.and_then(|t| t.token_to_id(n))).collect();
        Engine { session, base, settings, grammars: None, tool_format, markers, metrics }
    }

    /// Runs jobs until the queue closes.
    pub fn serve(mut self, jobs: std::sync::mpsc::Receiver<Job>) {
        while let Ok(job) = jobs.recv() {
            self.metrics.queue_depth.fetch_sub(1, Ordering::SeqCst);
            if job.cancel.load(Ordering::SeqCst) {
                continue;
            }
            self.metrics.running.store(1, Ordering::SeqCst);
            let t0 = Instant::now();
            let r = self.run(&job);
            self.metrics.running.store(0, Ordering::SeqCst);
            self.metrics.memory_active.store(mlx::memory::active() as u64, Ordering::SeqCst);
            self.metrics.memory_peak.store(mlx::memory::peak() as u64, Ordering::SeqCst);
            let wait = t0.duration_since(job.received).as_secs_f64();
            match r {
                Ok((finish, usage)) => {
                    self.metrics.record(usage.prompt, usage.cached, usage.completion);
                    tracing::info!(
                        target: "famlx::serve",
                        id = %job.id,
                        prompt_tokens = usage.prompt,
                        cached_tokens = usage.cached,
                        completion_tokens = usage.completion,
                        finish,
                        queued_s = format!("{wait:.3}"),
                        run_s = format!("{:.3}", t0.elapsed().as_secs_f64()),
                        "request done"
                    );
                    let _ = job.events.send(Event::Done { finish, usage });
                }
                Err(e) => {
                    self.metrics.failed.fetch_add(1, Ordering::SeqCst);
                    tracing::warn!(target: "famlx::serve", id = %job.id, status = e.status, "request failed: {}", e.message);
                    let _ = job.events.send(Event::Error(e));
                }
            }
        }
    }

    fn tokenizer(&self) -> Result<&Tokenizer, ApiError> {
        self.session.model.tokenizer().map_err(|e| ApiError::status(400, format!("{e:#}")))
    }

    /// The prompt's ids, and whether the template opened a think block.
    fn prompt_ids(&self, spec: &JobSpec) -> Result<(Vec<u32>, bool), ApiError> {
        let vocab = self.session.model.plan.vocab_size;
        let (ids, in_think) = match &spec.prompt {
            PromptSource::Ids(ids) => (ids.clone(), false),
            PromptSource::Text(t) => {
                let tok = self.tokenizer()?;
                (tok.encode(t, true).map_err(|e| ApiError::bad("prompt", e.to_string()))?, false)
            }
            PromptSource::Chat { messages, tools, kwargs } => {
                let tok = self.tokenizer()?;
                let text = render_chat(tok, messages, tools.as_deref(), kwargs)
                    .map_err(|e| ApiError::bad("messages", format!("{e:#}")))?;
                let think = text.trim_end().ends_with("<think>");
                (tok.encode(&text, true).map_err(|e| ApiError::bad("messages", e.to_string()))?, think)
            }
        };
        if ids.is_empty() {
            return Err(ApiError::bad("prompt", "the prompt is empty"));
        }
        if let Some(&bad) = ids.iter().find(|&&i| i >= vocab) {
            return Err(ApiError::bad("prompt", format!("token id {bad} is outside the vocabulary ({vocab} tokens)")));
        }
        Ok((ids, in_think))
    }

    /// The constraint a job needs: its response format, or a required tool call.
    fn grammar(&self, spec: &JobSpec) -> Result<Option<Grammar>, ApiError> {
        if let Some(g) = &spec.grammar {
            return Ok(Some(g.clone()));
        }
        let PromptSource::Chat { tools: Some(tools), .. } = &spec.prompt else { return Ok(None) };
        if !matches!(spec.tool_choice, ToolChoice::Required | ToolChoice::Named(_)) {
            return Ok(None);
        }
        let Some(format) = self.tool_format else {
            return Err(ApiError::bad("tool_choice", "this model's chat template has no tool-call markup to require"));
        };
        let tok = self.tokenizer()?;
        let single = |s: &str| match tok.encode(s, false) {
            Ok(ids) if ids.len() == 1 => Some(ids[0]),
            _ => None,
        };
        Ok(Some(Grammar::Lark(call_grammar(format, tools, &spec.tool_choice, single)?)))
    }

    fn grammars(&mut self) -> Result<&Grammars, ApiError> {
        if self.grammars.is_none() {
            let built = (|| {
                let tok = self.session.model.tokenizer()?;
                let eos = self.base.stop_ids.first().copied().unwrap_or(0);
                Grammars::new(tok, eos)
            })()
            .map_err(|e| format!("{e:#}"));
            self.grammars = Some(built);
        }
        match self.grammars.as_ref().expect("just set") {
            Ok(g) => Ok(g),
            Err(e) => Err(ApiError::bad("response_format", e.clone())),
        }
    }

    fn run(&mut self, job: &Job) -> Result<(&'static str, Usage), ApiError> {
        let spec = &job.spec;
        let (ids, in_think) = self.prompt_ids(spec)?;
        let room = self.session.model.context_room(ids.len()).map_err(|e| ApiError::status(413, format!("{e:#}")))?;
        let mut max = spec.max_tokens.unwrap_or(self.settings.default_max_tokens);
        if let Some(r) = room {
            if r == 0 {
                return Err(ApiError::status(413, "the prompt fills the model's whole context"));
            }
            max = max.min(r);
        }
        let mut constraint = match self.grammar(spec)? {
            Some(g) => {
                let param = if spec.grammar.is_some() { "response_format" } else { "tools" };
                let m = self.grammars()?.matcher(&g).map_err(|e| ApiError::bad(param, format!("{e:#}")))?;
                Some(m)
            }
            None => None,
        };
        if let Some(seed) = spec.seed {
            let _ = mlx::random::seed(seed);
        }
        let cancel = job.cancel.clone();
        let p = GenParams {
            max_tokens: max,
            sampler: spec.sampler.clone(),
            cancel: Some(cancel.clone()),
            logits: spec.logits.clone(),
            logprobs: spec.logprobs,
            ..self.base.clone()
        };
        let tools = match &spec.prompt {
            PromptSource::Chat { tools: Some(t), .. } => self.tool_format.map(|f| (f, t.clone())),
            _ => None,
        };
        let tok = self.tokenizer()?.clone();
        let mut detok = tok.detokenizer_with(false);
        let mut reply = ReplyText::new(spec.stop.clone(), spec.chat, in_think, tools);
        let _ = job.events.send(Event::Started);
        if spec.echo {
            if let PromptSource::Text(t) = &spec.prompt {
                let _ = job
                    .events
                    .send(Event::Delta { delta: Delta { content: t.clone(), ..Delta::default() }, logprobs: vec![] });
            }
        }
        let deadline = self.settings.timeout.map(|t| job.received + t);
        let stop_ids = p.stop_ids.clone();
        let markers = self.markers.clone();
        let events = job.events.clone();
        let mut timed_out = false;
        let mut calls = 0usize;
        let mut on_step = |s: &Step| -> bool {
            if stop_ids.contains(&s.token) {
                return true;
            }
            let shown = !tok.is_special(s.token) || markers.contains(&s.token);
            let delta = if shown { reply.push(&detok.push(s.token)) } else { Delta::default() };
            let logprobs = match &s.logprob {
                Some(lp) => vec![LogprobEntry {
                    token: tok.decode(&[s.token], false).unwrap_or_default(),
                    logprob: lp.logprob,
                    top: lp.top.iter().map(|(id, l)| (tok.decode(&[*id], false).unwrap_or_default(), *l)).collect(),
                }],
                None => vec![],
            };
            calls += delta.tool_calls.len();
            if (!delta.is_empty() || !logprobs.is_empty()) && events.send(Event::Delta { delta, logprobs }).is_err() {
                cancel.store(true, Ordering::SeqCst);
                return false;
            }
            if deadline.is_some_and(|d| Instant::now() > d) {
                timed_out = true;
                return false;
            }
            !reply.stopped
        };
        let guided = constraint.is_some() || spec.logprobs.is_some() || !spec.logits.is_off();
        let prompt = Prompt::text(ids.clone());
        let run = if guided {
            let c = constraint.as_mut().map(|c| c as &mut dyn crate::decode::Constraint);
            self.session.generate_guided(&prompt, &p, c, &mut on_step)
        } else {
            self.session.generate_prompt(&prompt, &p, |t| on_step(&Step { token: t, logprob: None }))
        };
        let (stats, prefilled): (GenStats, usize) = match run {
            Ok(r) => r,
            Err(e) if e.downcast_ref::<Interrupted>().is_some() => {
                return Ok(("cancelled", Usage { prompt: ids.len(), ..Usage::default() }))
            }
            Err(e) => return Err(ApiError::status(500, format!("generation failed: {e:#}"))),
        };
        let mut tail = reply.push(&detok.finish());
        tail.append(reply.finish());
        calls += tail.tool_calls.len();
        for bad in &reply.bad_calls {
            tracing::warn!(target: "famlx::serve", id = %job.id, "tool call returned as text: {bad}");
        }
        if !tail.is_empty() {
            let _ = job.events.send(Event::Delta { delta: tail, logprobs: vec![] });
        }
        let completion = stats.tokens.iter().filter(|t| !stop_ids.contains(t)).count();
        let finish = if calls > 0 {
            "tool_calls"
        } else if timed_out || (stats.finish == Finish::Length && !reply.stopped) {
            "length"
        } else if job.cancel.load(Ordering::SeqCst) {
            "cancelled"
        } else {
            "stop"
        };
        Ok((finish, Usage { prompt: ids.len(), cached: ids.len() - prefilled, completion }))
    }
}
