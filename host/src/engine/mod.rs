//! The continuous-batching engine, apart from any front end: the thread it
//! runs on alone touches MLX. It owns the model and runs the [`Request`]s a
//! front end sends, telling each request's [`Listener`] what happens. In
//! continuous batching requests join the batch between decode steps (their
//! prompts prefilled in chunks, interleaved with the steps), every step is
//! one forward for all decoding rows, and a row leaves as soon as it ends.
//! Each row has its own caches; finished rows' caches go into the prompt
//! cache, which later requests reuse for their longest shared prefix.

mod admit;
mod lockstep;
mod media;
mod metrics;
mod request;
mod row;
mod turn;

use crate::cache::{BatchCaches, DraftHit, DraftState, PrefixCache, SharedCache};
pub use crate::decode::FinishReason;
use crate::decode::{
    decode_alone, decode_step, logprob_of, prefill_step, Drafter, GenParams, Interrupted, RoundGuide, SpecParams,
    TokenLogprob,
};
use crate::model::{LoadedModel, RowDraft};
use crate::sample::sample;
pub use metrics::Metrics;
use mlx::Array;
pub use request::{
    DecodedPart, EngineError, ErrorKind, Event, Heard, Listener, LogprobEntry, Request, RequestParams, Usage,
};
use row::{Row, Vocab};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::Duration;

/// Settings the engine applies to every request.
#[derive(Debug, Clone)]
pub struct EngineSettings {
    /// `max_tokens` when a request gives none.
    pub default_max_tokens: usize,
    /// Longest a request may run.
    pub timeout: Option<Duration>,
    /// Most requests decoded at once (rows of a step).
    pub max_concurrency: usize,
    /// Most prompts prefilled (one chunk each) between two decode steps.
    pub prefill_concurrency: usize,
    /// Bytes the prompt cache may hold.
    pub prompt_cache_bytes: usize,
}

/// Makes a request again from its [`Request::origin`]: how a rank that
/// follows rank 0 gets the requests rank 0 took (the front end checks and
/// prepares the same text the same way).
pub type Replay = dyn Fn(&str) -> anyhow::Result<Request>;

/// The continuous-batching engine: it owns the model and runs the
/// requests a front end sends it, each reply going to the request's
/// [`Listener`].
pub struct Engine {
    model: LoadedModel,
    base: GenParams,
    settings: EngineSettings,
    /// Special tokens whose text the reply keeps (a front end's markers:
    /// reasoning, tool calls); other special tokens are left out, as
    /// `famlx generate` does.
    markers: Vec<u32>,
    prefix: PrefixCache,
    /// The decoding rows' caches, stacked.
    batch: BatchCaches,
    /// The next row's id.
    serial: u64,
    /// A decode step queued on the device whose tokens are not read yet.
    inflight: Option<InFlight>,
    metrics: Arc<Metrics>,
    /// The drafter a request decoding alone speculates with, and how.
    drafter: Option<(Drafter, SpecParams)>,
}

impl Engine {
    /// An engine over a loaded model; `base` carries the stop ids and
    /// prefill step; with `drafter`, a request decoding alone speculates.
    pub fn new(
        model: LoadedModel,
        base: GenParams,
        settings: EngineSettings,
        metrics: Arc<Metrics>,
        drafter: Option<(Drafter, SpecParams)>,
    ) -> Engine {
        let prefix = PrefixCache::new(settings.prompt_cache_bytes);
        Engine {
            model,
            base,
            settings,
            markers: Vec::new(),
            prefix,
            batch: BatchCaches::new(),
            serial: 0,
            inflight: None,
            metrics,
            drafter,
        }
    }

    /// Shows the text of the special tokens `names` in replies (the
    /// markers a front end splits replies by); other special tokens'
    /// text is left out.
    pub fn show_specials(mut self, names: &[&str]) -> Engine {
        let tok = self.model.tokenizer.as_ref();
        self.markers = names.iter().filter_map(|n| tok.and_then(|t| t.token_to_id(n))).collect();
        self
    }

    /// Runs requests until the queue closes and the batch is empty. On
    /// rank 0 of a distributed run, each turn's arrivals and endings also
    /// go to the other ranks (the lockstep of split ranks).
    pub fn serve(self, jobs: Receiver<Request>) {
        let role = if crate::distributed::parallel().is_some() { Role::Lead } else { Role::Alone };
        self.run(Some(jobs), role, None)
    }

    /// A rank other than 0 of a distributed run: runs the turns rank 0
    /// sends until it closes, making each request again with `replay`.
    pub fn follow(self, replay: &Replay) {
        self.run(None, Role::Follow, Some(replay))
    }

    /// The loop: turn after turn of intake, admission, prefill, decode
    /// (step choice, failure handling) and metrics, until the queue closes
    /// (a follower: rank 0 closes) with no row left.
    fn run(mut self, jobs: Option<Receiver<Request>>, role: Role, replay: Option<&Replay>) {
        let mut prefilling: VecDeque<Row> = VecDeque::new();
        let mut decoding: Vec<Row> = Vec::new();
        let mut open = jobs.is_some();
        loop {
            let live: Vec<&Row> = prefilling.iter().chain(decoding.iter()).collect();
            let turn = self.next_turn(jobs.as_ref(), role, &live, &mut open, replay);
            for r in prefilling.iter_mut().chain(decoding.iter_mut()) {
                if let Some((_, why)) = turn.halts.iter().find(|(s, _)| *s == r.serial) {
                    r.halt = Some(*why);
                }
            }
            self.admit(turn.arrived, role, &mut prefilling);
            if prefilling.is_empty() && decoding.is_empty() {
                if turn.closed {
                    break;
                }
                continue;
            }
            self.prefill_turn(&mut prefilling, &mut decoding);
            if !decoding.is_empty() {
                self.decode_turn(&mut decoding);
            }
            self.record(decoding.len());
        }
        let _ = mlx::synchronize();
    }

    /// Admission: each arrival checked against the model and made a row
    /// that waits for its prefill, or failed.
    fn admit(&mut self, arrived: Vec<Request>, role: Role, prefilling: &mut VecDeque<Row>) {
        for mut job in arrived {
            // A panic in one request's admission fails that request, not the server.
            let admitted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.admit_inner(&mut job)))
                .unwrap_or_else(|p| Err(EngineError::internal(format!("internal error: {}", panic_text(&p)))));
            match admitted {
                Ok(mut parts) => {
                    self.serial += 1;
                    let hit = parts.draft.take();
                    let mut row = parts.into_row(job, self.serial);
                    row.lockstep = role != Role::Alone;
                    if role == Role::Alone {
                        self.row_draft(&mut row, hit);
                    }
                    prefilling.push_back(row);
                }
                Err(e) => self.fail(&mut job, e),
            }
        }
    }

    /// Prefill: one chunk for the first rows waiting. A panic in it drops
    /// the rows it held (their listeners hear no more); the others go on.
    fn prefill_turn(&mut self, prefilling: &mut VecDeque<Row>, decoding: &mut Vec<Row>) {
        let prefilled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.prefill(prefilling, decoding)));
        if let Err(p) = prefilled {
            self.metrics.failed.fetch_add(1, Ordering::SeqCst);
            tracing::error!(target: "famlx::serve", "a prefill panicked: {}", panic_text(&p));
        }
    }

    /// Decode: one step for the decoding rows; the rows that ended leave.
    fn decode_turn(&mut self, decoding: &mut Vec<Row>) {
        self.metrics.running_max.fetch_max(decoding.len(), Ordering::SeqCst);
        // A panic in a step fails the rows in it, not the server.
        let stepped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.choose_step(decoding)))
            .unwrap_or_else(|p| Err(anyhow::anyhow!("internal error: {}", panic_text(&p))));
        if let Err(e) = stepped {
            self.fail_step(decoding, e);
        }
        let (done, going): (Vec<Row>, Vec<Row>) = decoding.drain(..).partition(|r| r.finish.is_some());
        *decoding = going;
        for mut r in done {
            // Its caches come back out of the batch before they are kept.
            match self.batch.release(r.serial) {
                Ok(()) => self.finish(r),
                Err(e) => self.fail(&mut r.job, EngineError::internal(format!("generation failed: {e:#}"))),
            }
        }
    }

    /// Step choice: a row decoding alone with drafter caches speculates;
    /// otherwise every row takes a plain step together.
    fn choose_step(&mut self, decoding: &mut [Row]) -> anyhow::Result<()> {
        if decoding.len() == 1 && decoding[0].seq.row_draft.is_some() {
            // A row with drafter caches never took a plain step: a step
            // still in flight is for rows that have ended.
            self.inflight = None;
            self.spec_step(&mut decoding[0])
        } else {
            // Drafter caches follow a request only while it decodes alone.
            decoding.iter_mut().for_each(|r| (r.seq.row_draft, r.seq.draft) = (None, None));
            self.step(decoding)
        }
    }

    /// Failure handling: a step that failed fails every row in it, and the
    /// batch starts over.
    fn fail_step(&mut self, decoding: &mut Vec<Row>, e: anyhow::Error) {
        let e = EngineError::internal(format!("generation failed: {e:#}"));
        for mut r in decoding.drain(..) {
            self.fail(&mut r.job, e.clone());
        }
        self.batch = BatchCaches::new();
        self.inflight = None;
    }

    /// Metrics: the gauges after a turn.
    fn record(&self, running: usize) {
        self.metrics.running.store(running, Ordering::SeqCst);
        self.metrics.running_max.fetch_max(running, Ordering::SeqCst);
        self.metrics.memory_active.store(mlx::memory::active() as u64, Ordering::SeqCst);
        self.metrics.memory_peak.store(mlx::memory::peak() as u64, Ordering::SeqCst);
        self.metrics.prompt_cache_bytes.store(self.prefix.bytes() as u64, Ordering::SeqCst);
    }

    fn fail(&self, job: &mut Request, e: EngineError) {
        self.metrics.failed.fetch_add(1, Ordering::SeqCst);
        tracing::warn!(target: "famlx::serve", id = %job.id, kind = ?e.kind, "request failed: {}", e.message);
        job.listener.hear(Event::Failed(e));
    }

    /// One chunk of prefill for the first rows waiting; a row whose prompt
    /// is all in draws its first token and joins the decoding rows.
    fn prefill(&mut self, waiting: &mut VecDeque<Row>, decoding: &mut Vec<Row>) {
        let n = self.settings.prefill_concurrency.max(1).min(waiting.len());
        let step = self.base.prefill_step;
        let mut kept = VecDeque::new();
        for mut r in waiting.drain(..n).collect::<Vec<_>>() {
            let cancelled = !r.lockstep && r.job.cancel.load(Ordering::SeqCst);
            let stop = r.halt.or_else(|| cancelled.then_some(FinishReason::Cancelled));
            if let Some(why) = stop {
                r.finish = Some(why);
                self.finish(r);
                continue;
            }
            let draft = self.drafter.as_mut().map(|d| &mut d.0).filter(|_| r.seq.row_draft.is_some());
            let was = r.fed;
            let out = prefill_step(&mut self.model, &mut r.seq, &r.ids, &mut r.fed, step, draft);
            // The sequence holds the tokens by the ids the prompt cache keys them by.
            r.seq.push_ids(&r.cache_key[was..r.fed]);
            let out = out.and_then(|l| l.map(|l| self.first_token(&mut r, &l)).transpose());
            match out {
                Ok(None) => kept.push_back(r),
                Ok(Some((t, lp))) => {
                    let tok = self.model.tokenizer.as_ref().expect("admitted with a tokenizer");
                    r.emit(t, lp, &Vocab { tok, stop_ids: &self.base.stop_ids, markers: &self.markers });
                    if r.finish.is_some() {
                        self.finish(r);
                    } else {
                        decoding.push(r);
                    }
                }
                Err(e) if e.downcast_ref::<Interrupted>().is_some() => {
                    r.finish = Some(FinishReason::Cancelled);
                    self.finish(r);
                }
                Err(e) => self.fail(&mut r.job, EngineError::internal(format!("prefill failed: {e:#}"))),
            }
        }
        kept.extend(waiting.drain(..));
        *waiting = kept;
    }

    /// One decode step for every decoding row: one forward, then each row
    /// draws its token (the constraints' masks computed while the forward
    /// runs). When the rows are the same as last step's and none needs its
    /// token on the host before the next forward (no grammar, penalties or
    /// logprobs), the steps are pipelined: the next forward is queued on
    /// the device from the drawn tokens before they are read, so the device
    /// never waits for the host.
    fn step(&mut self, rows: &mut [Row]) -> anyhow::Result<()> {
        let serials: Vec<u64> = rows.iter().map(|r| r.serial).collect();
        let guided = rows.iter().any(|r| r.constraint.is_some() || r.logprobs.is_some() || !r.logits.is_off());
        if let Some(f) = self.inflight.take() {
            if f.serials == serials && !guided {
                let next = self.queue_step(rows, Some(&f.ys))?;
                self.emit_step(rows, f, true)?;
                self.inflight = Some(next);
                return Ok(());
            }
            // The rows changed: take in what is in flight, then start over.
            self.emit_step(rows, f, false)?;
            if rows.iter().any(|r| r.finish.is_some()) {
                return Ok(());
            }
        }
        let f = self.queue_step(rows, None)?;
        if guided {
            self.emit_step(rows, f, false)
        } else {
            self.inflight = Some(f);
            Ok(())
        }
    }

    /// The first token of a row whose prompt is all in, drawn from the
    /// prompt's last `logits`; the prompt's caches are kept for reuse when
    /// they could not be rewound to it later.
    fn first_token(&mut self, r: &mut Row, logits: &Array) -> anyhow::Result<(u32, Option<TokenLogprob>)> {
        if !r.seq.caches().iter().all(|c| c.lock().can_trim(r.ids.len() as i64)) {
            // Hybrid and windowed models rewind only to a snapshot: keep the prompt's.
            let draft = self.draft_state(r, r.ids.len() as i64);
            self.prefix.insert(r.seq.ids().to_vec(), r.seq.caches(), draft);
        }
        r.prepare_mask()?;
        let (y, lp) = r.sample(logits)?;
        let y = y.item_i64()? as u32;
        if r.seq.row_draft.is_some() {
            RowDraft::start(&mut r.seq, y)?;
        }
        Ok((y, lp))
    }

    /// Whether a request may speculate when it decodes alone: the server
    /// has a drafter, and the request has no seeded random stream (its reply
    /// must not depend on whether it decoded alone) and no media (drafters
    /// see text only). A grammar masks drafts and verify, penalties shape
    /// them, and logprobs come from the verify's logits.
    /// A prompt-cache `hit` may bring the drafter's state for the cached
    /// tokens; otherwise the drafter starts at the first token fed.
    /// When it may, its sequence gets the drafter's caches and replay state.
    fn row_draft(&self, r: &mut Row, hit: Option<DraftHit>) {
        let Some((d, _)) = self.drafter.as_ref() else { return };
        if r.key.is_some() || r.seq.media.is_some() {
            return;
        }
        match hit {
            Some(h) => RowDraft::resume(d, h, &mut r.seq),
            None => {
                if let Err(e) = RowDraft::attach(d, &mut r.seq) {
                    tracing::warn!(target: "famlx::serve", "drafter caches: {e:#}");
                }
            }
        }
    }

    /// The drafter's state for the `n` tokens row `r`'s caches hold, to
    /// keep beside them in the prompt cache (none when the row does not
    /// speculate).
    fn draft_state(&mut self, r: &mut Row, n: i64) -> Option<DraftState> {
        let (d, _) = self.drafter.as_mut()?;
        let state = RowDraft::state(&self.model, d, &mut r.seq, n);
        state.map_err(|e| tracing::warn!(target: "famlx::serve", "drafter state: {e:#}")).ok().flatten()
    }

    /// One draft-and-verify round for the only decoding row: its drafts the
    /// model agrees with and the model's next token are its new tokens.
    fn spec_step(&mut self, r: &mut Row) -> anyhow::Result<()> {
        let Some((d, sp)) = self.drafter.as_mut() else { anyhow::bail!("internal: a row drafts without a drafter") };
        let y = *r.tokens.last().ok_or_else(|| anyhow::anyhow!("internal: a decoding row has a token"))?;
        let depth = sp.depth.min(r.max_tokens.saturating_sub(r.tokens.len())).max(1);
        let logits = (!r.logits.is_off()).then_some((&r.logits, r.history.as_slice()));
        let guide = RoundGuide { grammar: r.constraint.as_mut(), logits };
        let round = RowDraft::round(&mut self.model, d, &mut r.seq, y, depth, &r.sampler, sp.min_confidence, guide)?;
        self.metrics.draft_proposed.fetch_add(round.proposed as u64, Ordering::SeqCst);
        self.metrics.draft_accepted.fetch_add(round.accepted.len() as u64, Ordering::SeqCst);
        let tok = self.model.tokenizer.as_ref().expect("admitted with a tokenizer");
        let v = Vocab { tok, stop_ids: &self.base.stop_ids, markers: &self.markers };
        for (j, &t) in round.accepted.iter().chain([&round.bonus]).enumerate() {
            let lp = match r.logprobs {
                Some(k) => {
                    let row = round.logits.slice_axis(0, j as i32, j as i32 + 1)?;
                    Some(logprob_of(&row, &Array::from_slice(&[t as i32], &[1])?, k)?)
                }
                None => None,
            };
            r.emit(t, lp, &v);
            if r.finish.is_some() {
                // The caches hold the round's first token and the accepted
                // drafts: give back those past this one's predecessor.
                let extra = round.accepted.len() - j.min(round.accepted.len());
                if extra > 0 && r.seq.row_draft.is_some() {
                    RowDraft::give_back(&mut self.model, &mut r.seq, &round, extra)?;
                }
                break;
            }
        }
        crate::memory::check()?;
        Ok(())
    }

    /// Queues one forward for `rows` (fed `tokens` on the device, else each
    /// row's last token) and each row's draw from it.
    fn queue_step(&mut self, rows: &mut [Row], tokens: Option<&Array>) -> anyhow::Result<InFlight> {
        let ids = match tokens {
            Some(t) => t.clone(),
            None => {
                let last: Vec<i32> =
                    rows.iter().map(|r| *r.tokens.last().expect("a decoding row has a token") as i32).collect();
                Array::from_slice(&last, &[last.len() as i32])?
            }
        };
        let logits = if let [r] = &mut *rows {
            // One row decodes on its own caches, as `generate` does.
            self.batch.set_rows(&[])?;
            decode_alone(&mut self.model, &mut r.seq, &ids)?
        } else {
            let members: Vec<(u64, &[SharedCache])> = rows.iter().map(|r| (r.serial, r.seq.caches())).collect();
            self.batch.set_rows(&members)?;
            self.batch.set_shifts(rows.iter().map(Row::shift).collect())?;
            decode_step(&mut self.model, &self.batch, &ids)?
        };
        mlx::async_eval(&[&logits])?;
        for r in rows.iter_mut() {
            r.prepare_mask()?;
        }
        let plain = |r: &Row| r.constraint.is_none() && r.key.is_none() && r.logprobs.is_none() && r.logits.is_off();
        let same = rows.iter().all(|r| plain(r) && r.sampler == rows[0].sampler);
        let (ys, lps) = if same {
            // One draw for all rows when they sample alike (e.g. all greedy).
            (sample(&logits, &rows[0].sampler)?, vec![None; rows.len()])
        } else {
            let mut ys = Vec::with_capacity(rows.len());
            let mut lps = Vec::with_capacity(rows.len());
            for (i, r) in rows.iter_mut().enumerate() {
                let (y, lp) = r.sample(&logits.slice_axis(0, i as i32, i as i32 + 1)?)?;
                ys.push(y);
                lps.push(lp);
            }
            (mlx::concatenate(&ys.iter().collect::<Vec<_>>(), 0)?, lps)
        };
        let ys = ys.astype(mlx::Dtype::I32)?;
        mlx::async_eval(&[&ys])?;
        Ok(InFlight { ys, lps, serials: rows.iter().map(|r| r.serial).collect() })
    }

    /// Reads the tokens of a queued step and hands each to its row (rows
    /// matched by id; a row that left since gets nothing). `fed`: the next
    /// step, queued already, has fed these tokens into the caches.
    fn emit_step(&mut self, rows: &mut [Row], f: InFlight, fed: bool) -> anyhow::Result<()> {
        let ids = f.ys.to_vec::<i32>()?;
        let tok = self.model.tokenizer.as_ref().expect("admitted with a tokenizer");
        let v = Vocab { tok, stop_ids: &self.base.stop_ids, markers: &self.markers };
        let mut lps: Vec<Option<crate::decode::TokenLogprob>> = f.lps;
        for r in rows.iter_mut() {
            if let Some(i) = f.serials.iter().position(|&s| s == r.serial) {
                r.emit(ids[i] as u32, lps[i].take(), &v);
                if r.finish.is_some() {
                    r.fed_last = fed;
                }
            }
        }
        crate::memory::check()?;
        Ok(())
    }

    /// A row that ended: its last text and the `Done` event, its caches
    /// into the prompt cache, the counters and the log line.
    fn finish(&mut self, mut r: Row) {
        let finish = r.close();
        let usage =
            Usage { prompt: r.ids.len(), cached: r.cached, completion: r.completion_tokens(&self.base.stop_ids) };
        if r.fed == r.ids.len() && finish != FinishReason::Cancelled {
            r.record_output();
            let (at, held) = (r.seq.cache_offset(), r.seq.ids().len());
            if at == held as i64 {
                let draft = self.draft_state(&mut r, at);
                self.prefix.insert(r.seq.ids().to_vec(), r.seq.caches(), draft);
            } else {
                // Never key a snapshot by tokens it does not hold.
                tracing::warn!(target: "famlx::serve", id = %r.job.id, "caches hold {at} tokens, the reply {held}: not kept for reuse");
            }
        }
        self.metrics.record(usage.prompt, usage.cached, usage.completion);
        let ttft = r.first_at.map_or(0.0, |t| t.duration_since(r.job.received).as_secs_f64());
        tracing::info!(
            target: "famlx::serve",
            id = %r.job.id,
            prompt_tokens = usage.prompt,
            cached_tokens = usage.cached,
            completion_tokens = usage.completion,
            finish = finish.name(),
            queued_s = format!("{:.3}", r.started.duration_since(r.job.received).as_secs_f64()),
            ttft_s = format!("{ttft:.3}"),
            total_s = format!("{:.3}", r.job.received.elapsed().as_secs_f64()),
            "request done"
        );
        r.job.listener.hear(Event::Done { finish, usage });
    }
}

/// Where an engine stands among the ranks of a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// One process.
    Alone,
    /// Rank 0 of several: takes the requests, sends each turn's news.
    Lead,
    /// Another rank: runs the turns rank 0 sends.
    Follow,
}

/// What a caught panic said.
fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned()).unwrap_or_default()
}

/// A decode step on the device: each row's drawn token, not read yet.
struct InFlight {
    ys: Array,
    lps: Vec<Option<crate::decode::TokenLogprob>>,
    serials: Vec<u64>,
}
