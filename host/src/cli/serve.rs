//! `famlx serve`: the flags, and the model loaded for the server.

use super::args::{CacheArgs, ModelArgs, SamplingArgs, SpecArgs};
use super::setup::{load, params};
use crate::serve::{EngineSettings, ServerOptions};
use anyhow::Result;
use clap::Args;
use std::time::Duration;

/// `famlx serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0: any free port, printed at start).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Require `Authorization: Bearer KEY` on the API routes.
    #[arg(long = "api-key")]
    pub api_key: Option<String>,
    /// Requests that may wait for the engine; more get 503.
    #[arg(long = "max-queue", default_value_t = 64)]
    pub max_queue: usize,
    /// Longest a request may run, in seconds (0: no limit); then it ends with finish_reason "length".
    #[arg(long = "request-timeout", default_value_t = 600)]
    pub request_timeout: u64,
    /// `max_tokens` for requests that give none.
    #[arg(long = "max-tokens", short = 'm', default_value_t = 512)]
    pub max_tokens: usize,
    /// Model and plugins.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Prefill and KV caches.
    #[command(flatten)]
    pub cache: CacheArgs,
    /// Speculative decoding.
    #[command(flatten)]
    pub spec: SpecArgs,
}

/// Runs `famlx serve`.
pub(crate) fn run(a: ServeArgs) -> Result<()> {
    let o = ServerOptions {
        host: a.host.clone(),
        port: a.port,
        api_key: a.api_key.clone(),
        max_queue: a.max_queue,
        engine: EngineSettings {
            default_max_tokens: a.max_tokens,
            timeout: (a.request_timeout > 0).then(|| Duration::from_secs(a.request_timeout)),
        },
        model_name: a.model.model.clone().unwrap_or_else(|| crate::default_model::NAME.to_string()),
    };
    let (model, cache, spec) = (a.model, a.cache, a.spec);
    crate::serve::run(o, move || {
        let s = load(&model, &cache, Some(&spec), false)?;
        // Per-request sampling replaces these; the stop ids and prefill step stay.
        let sampling = SamplingArgs { max_tokens: 256, temperature: 0.0, top_p: 1.0, top_k: 0, min_p: 0.0, seed: None };
        let base = params(&sampling, &cache, &s.model)?;
        Ok((s, base))
    })
}
