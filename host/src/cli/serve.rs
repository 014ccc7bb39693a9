//! `famlx serve`: the flags, and the model loaded for the server.

use super::args::{at_most, CacheArgs, ModelArgs, SamplingArgs, SpecArgs, MAX_TOKENS_FLAG};
use super::setup::{load, params};
use crate::serve::{EngineSettings, Limits, ServerOptions};
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
    /// Requests that may wait for the engine (at most 65536: the queue is
    /// made at its full size); more get 503.
    #[arg(long = "max-queue", default_value_t = 64, value_parser = at_most(65536))]
    pub max_queue: usize,
    /// Longest a request may run, in seconds (0: no limit; at most a year,
    /// 31536000); then it ends with finish_reason "length".
    #[arg(long = "request-timeout", default_value_t = 600,
          value_parser = clap::value_parser!(u64).range(0..=31_536_000))]
    pub request_timeout: u64,
    /// `max_tokens` for requests that give none.
    #[arg(long = "max-tokens", short = 'm', default_value_t = 512, value_parser = at_most(MAX_TOKENS_FLAG))]
    pub max_tokens: usize,
    /// Most requests decoded together (rows of one batched step); more wait in the queue.
    #[arg(long = "max-concurrency", default_value_t = 32)]
    pub max_concurrency: usize,
    /// Most prompts prefilled (one chunk each) between two decode steps.
    #[arg(long = "prefill-concurrency", default_value_t = 8)]
    pub prefill_concurrency: usize,
    /// Bytes the prompt cache (reused prefixes across requests) may hold (e.g. 512M, 4G; 0: off).
    #[arg(long = "prompt-cache-bytes", value_parser = cache_bytes, default_value = "2G")]
    pub prompt_cache_bytes: usize,
    /// What one client or request may take of the server.
    #[command(flatten)]
    pub limits: LimitArgs,
    /// Model and plugins.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Prefill and KV caches.
    #[command(flatten)]
    pub cache: CacheArgs,
    /// Speculative decoding, for a request that decodes alone.
    #[command(flatten)]
    pub spec: SpecArgs,
}

/// `famlx serve`'s bounds on clients and requests (defaults keep one
/// client from starving the rest).
#[derive(Args, Debug)]
pub struct LimitArgs {
    /// Open connections at once; one more is answered 503 and closed.
    #[arg(long = "max-connections", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_connections: u32,
    /// Seconds a client may take to send a request's headers (idle keep-alive connections close after it).
    #[arg(long = "header-timeout", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub header_timeout: u64,
    /// Seconds a client may take to send a request's body; then 408.
    #[arg(long = "body-timeout", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub body_timeout: u64,
    /// Largest request body (e.g. 64M); larger is 413.
    #[arg(long = "max-body-bytes", value_parser = nonzero_bytes, default_value = "64M")]
    pub max_body_bytes: usize,
    /// Bytes of request bodies held at once over all requests (e.g. 512M); past it, 503.
    #[arg(long = "max-pending-bytes", value_parser = nonzero_bytes, default_value = "512M")]
    pub max_pending_bytes: usize,
    /// Longest prompt in tokens (the model's context also bounds it); longer is 413.
    #[arg(long = "max-prompt-tokens", default_value_t = 131_072, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_prompt_tokens: u32,
    /// Most images and audio clips in one request.
    #[arg(long = "max-media-items", default_value_t = 16, value_parser = clap::value_parser!(u32).range(0..=4096))]
    pub max_media_items: u32,
    /// Most bytes of decoded pixels and samples one request may hold (e.g. 256M).
    #[arg(long = "max-media-bytes", value_parser = nonzero_bytes, default_value = "256M")]
    pub max_media_bytes: usize,
}

impl LimitArgs {
    fn limits(&self) -> Limits {
        Limits {
            max_connections: self.max_connections as usize,
            header_timeout: Duration::from_secs(self.header_timeout),
            body_timeout: Duration::from_secs(self.body_timeout),
            max_body_bytes: self.max_body_bytes,
            max_pending_bytes: self.max_pending_bytes.max(self.max_body_bytes),
            max_prompt_tokens: self.max_prompt_tokens as usize,
            max_media_items: self.max_media_items as usize,
            max_media_bytes: self.max_media_bytes,
            ..Limits::default()
        }
    }
}

/// A memory size that is not 0.
fn nonzero_bytes(s: &str) -> Result<usize, String> {
    match crate::memory::parse_bytes(s)? {
        0 => Err("must be more than 0".into()),
        n => Ok(n),
    }
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
            max_concurrency: a.max_concurrency,
            prefill_concurrency: a.prefill_concurrency,
            prompt_cache_bytes: a.prompt_cache_bytes,
        },
        limits: a.limits.limits(),
        model_name: a.model.model.clone().unwrap_or_else(|| crate::default_model::NAME.to_string()),
    };
    if a.max_concurrency == 0 || a.prefill_concurrency == 0 {
        anyhow::bail!("--max-concurrency and --prefill-concurrency must be at least 1");
    }
    let asked = a.spec.draft_model.is_some() || a.spec.depth.is_some();
    if crate::distributed::launched() && asked {
        anyhow::bail!(
            "speculative decoding is for one process: a server split over ranks decodes without a drafter (leave out --draft-model / --mtp-depth)"
        );
    }
    let (model, cache, spec) = (a.model, a.cache, a.spec);
    crate::serve::run(o, move || {
        // A batch decodes without the drafter; a request decoding alone speculates.
        let spec = (!crate::distributed::launched()).then_some(&spec);
        let s = load(&model, &cache, spec, false)?;
        // Per-request sampling replaces these; the stop ids and prefill step stay.
        let sampling = SamplingArgs { max_tokens: 256, temperature: 0.0, top_p: 1.0, top_k: 0, min_p: 0.0, seed: None };
        let base = params(&sampling, &cache, &s.model)?;
        let drafter = s.drafter.map(|d| (d, s.spec));
        Ok((s.model, base, drafter))
    })
}

/// `--prompt-cache-bytes`: a memory size, or 0 for no prompt cache.
fn cache_bytes(s: &str) -> Result<usize, String> {
    match s.trim() {
        "0" => Ok(0),
        _ => crate::memory::parse_bytes(s),
    }
}
