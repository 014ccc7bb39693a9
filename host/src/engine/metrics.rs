//! The engine's counters and gauges, shared with its front end, and
//! written in Prometheus' text format (the server's `/metrics`).

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// The counters of an engine and its front end.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Requests accepted into the queue.
    pub requests: AtomicU64,
    /// Requests refused (bad input, full queue, auth).
    pub rejected: AtomicU64,
    /// Requests that failed in the engine.
    pub failed: AtomicU64,
    /// Requests completed.
    pub completed: AtomicU64,
    /// Prompt tokens of completed requests.
    pub prompt_tokens: AtomicU64,
    /// Of those, reused from the cache.
    pub cached_tokens: AtomicU64,
    /// Generated tokens.
    pub completion_tokens: AtomicU64,
    /// Completed requests that reused part of their prompt.
    pub prefix_hits: AtomicU64,
    /// Tokens a drafter proposed (speculative decoding).
    pub draft_proposed: AtomicU64,
    /// Of those, tokens the model accepted.
    pub draft_accepted: AtomicU64,
    /// Jobs waiting for the engine.
    pub queue_depth: AtomicUsize,
    /// Sequences being decoded now.
    pub running: AtomicUsize,
    /// The most sequences decoded in one step so far.
    pub running_max: AtomicUsize,
    /// MLX memory in use after the last request.
    pub memory_active: AtomicU64,
    /// MLX peak memory since start.
    pub memory_peak: AtomicU64,
    /// Bytes the prompt cache holds.
    pub prompt_cache_bytes: AtomicU64,
}

impl Metrics {
    /// Counts a completed request: its prompt tokens, how many of them
    /// came from the cache, and the tokens generated.
    pub fn record(&self, prompt: usize, cached: usize, completion: usize) {
        self.completed.fetch_add(1, Ordering::SeqCst);
        self.prompt_tokens.fetch_add(prompt as u64, Ordering::SeqCst);
        self.cached_tokens.fetch_add(cached as u64, Ordering::SeqCst);
        self.completion_tokens.fetch_add(completion as u64, Ordering::SeqCst);
        if cached > 0 {
            self.prefix_hits.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let g = |a: &AtomicU64| a.load(Ordering::SeqCst);
        let rows: [(&str, &str, &str, u64); 16] = [
            ("famlx_requests_total", "counter", "Requests accepted.", g(&self.requests)),
            ("famlx_requests_rejected_total", "counter", "Requests refused before the engine.", g(&self.rejected)),
            ("famlx_requests_failed_total", "counter", "Requests that failed in the engine.", g(&self.failed)),
            ("famlx_requests_completed_total", "counter", "Requests completed.", g(&self.completed)),
            ("famlx_prompt_tokens_total", "counter", "Prompt tokens of completed requests.", g(&self.prompt_tokens)),
            (
                "famlx_prompt_cached_tokens_total",
                "counter",
                "Prompt tokens reused from the cache.",
                g(&self.cached_tokens),
            ),
            ("famlx_generation_tokens_total", "counter", "Generated tokens.", g(&self.completion_tokens)),
            ("famlx_prefix_cache_hits_total", "counter", "Requests that reused a cached prefix.", g(&self.prefix_hits)),
            ("famlx_draft_tokens_total", "counter", "Tokens the drafter proposed.", g(&self.draft_proposed)),
            ("famlx_draft_accepted_tokens_total", "counter", "Drafted tokens accepted.", g(&self.draft_accepted)),
            (
                "famlx_queue_depth",
                "gauge",
                "Requests waiting for the engine.",
                self.queue_depth.load(Ordering::SeqCst) as u64,
            ),
            ("famlx_batch_size", "gauge", "Sequences being decoded.", self.running.load(Ordering::SeqCst) as u64),
            (
                "famlx_batch_size_max",
                "gauge",
                "Most sequences decoded in one step.",
                self.running_max.load(Ordering::SeqCst) as u64,
            ),
            ("famlx_memory_active_bytes", "gauge", "MLX memory in use.", g(&self.memory_active)),
            ("famlx_memory_peak_bytes", "gauge", "MLX peak memory since start.", g(&self.memory_peak)),
            ("famlx_prompt_cache_bytes", "gauge", "Bytes the prompt cache holds.", g(&self.prompt_cache_bytes)),
        ];
        let mut s = String::new();
        for (name, kind, help, v) in rows {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}");
        }
        s
    }
}
