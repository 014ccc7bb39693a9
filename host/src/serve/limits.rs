//! What one client may take of the server: connections, time to send a
//! request, bytes held, prompt size and media. Each bound is a server
//! setting (`famlx serve --help`); a request past one is answered in
//! OpenAI's error shape (400, 408, 413, 429 or 503) before the work it
//! would cost is done, so one client cannot starve the rest.

use std::time::Duration;

/// The server's bounds on what a request may cost.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Open connections at once; one more is answered 503 and closed.
    pub max_connections: usize,
    /// Longest a client may take to send a request's headers (an idle
    /// keep-alive connection counts as waiting for headers).
    pub header_timeout: Duration,
    /// Longest a client may take to send a request's body: 408 after.
    pub body_timeout: Duration,
    /// Largest request body (images and clips come inline as base64).
    pub max_body_bytes: usize,
    /// Bytes of request bodies the server holds at once, over all
    /// requests; a body that would go past it is answered 503.
    pub max_pending_bytes: usize,
    /// Longest prompt in tokens, checked before the prompt reaches the
    /// engine (and, from its size in bytes, before it is tokenized).
    pub max_prompt_tokens: usize,
    /// Most images and clips in one request.
    pub max_media_items: usize,
    /// Most bytes of decoded pixels and samples one request may hold.
    pub max_media_bytes: usize,
    /// Requests prepared at once (templates, tokenizing, media decoding
    /// and grammar compiling, on threads apart from the engine).
    pub prepare_concurrency: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 256,
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(60),
            max_body_bytes: 64 << 20,
            max_pending_bytes: 512 << 20,
            max_prompt_tokens: 131_072,
            max_media_items: 16,
            max_media_bytes: 256 << 20,
            prepare_concurrency: 2,
        }
    }
}

/// Stack of the threads that compile grammars and run request work:
/// parsers recurse per level of a schema or grammar, and the levels are
/// bounded ([`crate::grammar`]'s limits) to fit in this with room to spare.
pub const WORK_STACK_BYTES: usize = 64 << 20;
