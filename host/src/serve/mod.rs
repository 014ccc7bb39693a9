//! `famlx serve`: an OpenAI-compatible HTTP server, one front end of the
//! [`crate::engine`]. axum on tokio answers the HTTP side ([`http`]); one
//! engine thread owns every MLX object and runs the requests from a
//! bounded queue, reusing the cached prompt prefix between them. Requests
//! are checked in [`api`] and made ready in [`prepare`], made into the
//! engine's requests in [`job`], their replies split into content,
//! reasoning and tool calls in [`output`] and [`tools`], structured
//! output constrained through [`crate::grammar`].

pub mod api;
pub mod error;
pub mod http;
pub mod job;
pub mod limits;
pub mod listen;
pub mod output;
pub mod prepare;
pub mod tools;

use crate::decode::{Drafter, GenParams, SpecParams};
pub use crate::engine::EngineSettings;
use crate::engine::{Engine, Metrics};
use crate::model::LoadedModel;
use anyhow::{Context, Result};
pub use limits::Limits;
use prepare::{ModelFacts, Preparer};
use std::sync::Arc;
use std::time::Duration;

/// How the server listens and what it allows.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Address to listen on.
    pub host: String,
    /// Port (0: any free port).
    pub port: u16,
    /// Required bearer token.
    pub api_key: Option<String>,
    /// Requests that may wait for the engine.
    pub max_queue: usize,
    /// What the engine applies to every request.
    pub engine: EngineSettings,
    /// What one request or client may take.
    pub limits: Limits,
    /// The name the model is served as.
    pub model_name: String,
}

/// What the engine runs on: the model, the base generation parameters
/// (stop ids, prefill step) and the drafter a lone request speculates with.
pub type Built = (LoadedModel, GenParams, Option<(Drafter, SpecParams)>);

/// Runs the server until SIGINT or SIGTERM. `load` builds the model and
/// the base generation parameters (stop ids, prefill step) on the engine
/// thread: MLX state is not `Send`, so it is made where it is used.
pub fn run(o: ServerOptions, load: impl FnOnce() -> Result<Built> + Send + 'static) -> Result<()> {
    if o.max_queue == 0 {
        anyhow::bail!("--max-queue must be at least 1");
    }
    let metrics = Arc::new(Metrics::default());
    if crate::distributed::launched() && crate::distributed::rank_from_env() > 0 {
        return follow(o, load, metrics);
    }
    let (queue, jobs) = std::sync::mpsc::sync_channel(o.max_queue);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<Arc<Preparer>, String>>();
    let settings = o.engine.clone();
    let limits = o.limits.clone();
    let m = metrics.clone();
    let engine = std::thread::Builder::new().name("famlx-engine".into()).stack_size(limits::WORK_STACK_BYTES).spawn(
        move || {
            let built = load().map(|(s, base, d)| {
                let preparer = Arc::new(Preparer::new(facts(&s, &base), limits));
                let shown = shown_specials(preparer.tool_format());
                (Engine::new(s, base, settings, m, d).show_specials(&shown), preparer)
            });
            match built {
                Ok((e, preparer)) => {
                    let _ = ready_tx.send(Ok(preparer));
                    e.serve(jobs);
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(format!("{e:#}")));
                }
            }
            let _ = mlx::synchronize();
        },
    )?;
    let preparer = match ready_rx.recv() {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => anyhow::bail!("{e}"),
        Err(_) => anyhow::bail!("the engine thread stopped while loading the model"),
    };
    let name = o.model_name.clone();
    let mut ids = vec![name.clone()];
    if let Some(base) = std::path::Path::new(&name).file_name().and_then(|b| b.to_str()) {
        if base != name {
            ids.push(base.to_string());
        }
    }
    let state = Arc::new(http::AppState::new(queue, metrics, ids, o.api_key.clone(), preparer));
    // Blocking threads prepare requests (templates, tokenizing, grammars):
    // as many as may prepare at once, on stacks sized for grammar limits.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(o.limits.prepare_concurrency.max(1) + 2)
        .thread_stack_size(limits::WORK_STACK_BYTES)
        .enable_all()
        .build()?;
    let app = http::router(state.clone());
    rt.block_on(async move {
        let addr = format!("{}:{}", o.host, o.port);
        let listener =
            tokio::net::TcpListener::bind(&addr).await.with_context(|| format!("cannot listen on {addr}"))?;
        let local = listener.local_addr()?;
        eprintln!("famlx: serving {name} on http://{local}/v1 (Ctrl-C to stop)");
        listen::serve(listener, app, &o.limits, shutdown_signal()).await?;
        Ok::<_, anyhow::Error>(())
    })?;
    // The queue closes with the last handle: the engine finishes what it holds, then ends.
    drop(state);
    rt.shutdown_timeout(Duration::from_secs(1));
    let _ = engine.join();
    eprintln!("famlx: server stopped");
    Ok(())
}

/// A rank other than 0 of a distributed server: no HTTP, the engine runs
/// the turns rank 0 sends until rank 0 closes. SIGINT and SIGTERM are left
/// to rank 0, which finishes what it holds and then closes every rank.
fn follow(
    o: ServerOptions,
    load: impl FnOnce() -> Result<Built> + Send + 'static,
    metrics: Arc<Metrics>,
) -> Result<()> {
    // SAFETY: setting the disposition of two signals to ignored.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGTERM, libc::SIG_IGN);
    }
    // Requests are prepared on the engine here: its stack is sized for that.
    let engine = std::thread::Builder::new().name("famlx-engine".into()).stack_size(limits::WORK_STACK_BYTES).spawn(
        move || {
            let (model, base, _) = load()?;
            let preparer = Arc::new(Preparer::new(facts(&model, &base), o.limits.clone()));
            let shown = shown_specials(preparer.tool_format());
            Engine::new(model, base, o.engine.clone(), metrics, None)
                .show_specials(&shown)
                .follow(&job::replay(preparer));
            Ok(())
        },
    )?;
    engine.join().map_err(|_| anyhow::anyhow!("the engine thread panicked"))?
}

/// The special tokens whose text replies keep: the markers they are split
/// by (reasoning, the model's tool calls, Gemma's string quote).
fn shown_specials(tool_format: Option<tools::ToolFormat>) -> Vec<&'static str> {
    let mut names: Vec<&str> = output::THINK.iter().flat_map(|(s, e)| [*s, *e]).collect();
    names.extend(tool_format.and_then(|f| f.markers()).map(|(s, e)| [s, e]).into_iter().flatten());
    names.push(tools::GEMMA_QUOTE);
    names
}

/// What preparing requests needs of the model.
fn facts(model: &LoadedModel, base: &GenParams) -> ModelFacts {
    let tokenizer = model.tokenizer().cloned().map_err(|e| format!("{e:#}"));
    let tool_format = tokenizer.as_ref().ok().and_then(|t| t.chat_template()).and_then(tools::ToolFormat::detect);
    let ctx = model.plan.max_position_embeddings as usize;
    ModelFacts {
        tokenizer,
        tool_format,
        vocab_size: model.plan.vocab_size,
        eos: base.stop_ids.first().copied().unwrap_or(0),
        media: [crate::prompt::MediaKind::Image, crate::prompt::MediaKind::Audio]
            .into_iter()
            .map(|k| (k, crate::prompt::takes_kind(model, k)))
            .collect(),
        context: (ctx > 0 && model.cache_opts.max_kv_size.is_none()).then_some(ctx),
    }
}

/// Resolves on SIGINT or SIGTERM: in-flight requests then finish (graceful shutdown).
async fn shutdown_signal() {
    let term = async {
        #[cfg(unix)]
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            s.recv().await;
            return;
        }
        std::future::pending::<()>().await
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
    eprintln!("famlx: shutting down: finishing requests in flight");
}
