//! What a request needs before the engine takes it: the prompt rendered
//! and tokenized, its images and clips decoded, its grammar compiled, each
//! checked against the server's [`Limits`]. The HTTP side does this on
//! threads of its own (never the engine's, which would stall every other
//! request for as long as one large prompt takes); the engine then only
//! runs the family's media processors and the model. Ranks of a split
//! server that get a request from rank 0 prepare it on their engine.

use super::api::{ApiError, JobSpec, PromptSource};
use super::limits::Limits;
use super::tools::{call_grammar, ToolChoice, ToolFormat};
pub use crate::engine::DecodedPart;
use crate::grammar::{Grammar, GrammarConstraint, Grammars};
use crate::prompt::{render_chat, Decoded, MediaKind};
use famlx_text::Tokenizer;
use std::sync::OnceLock;

/// A request made ready for the engine.
pub struct Prepared {
    /// The prompt's token ids (one marker per image or clip, not expanded yet).
    pub ids: Vec<u32>,
    /// Whether the template opened a think block.
    pub in_think: bool,
    /// The images and clips, decoded, in prompt order.
    pub media: Vec<DecodedPart>,
    /// The output constraint, compiled.
    pub constraint: Option<GrammarConstraint>,
}

/// What preparing needs of the model, taken from it once at start.
#[derive(Clone)]
pub struct ModelFacts {
    /// The tokenizer, or why there is none (then every text request fails).
    pub tokenizer: Result<Tokenizer, String>,
    /// The markup its template writes tool calls in.
    pub tool_format: Option<ToolFormat>,
    /// The vocabulary's size.
    pub vocab_size: u32,
    /// The token that ends a constrained output.
    pub eos: u32,
    /// The kinds of media it takes; for the others, the line that says so.
    pub media: Vec<(MediaKind, Result<(), String>)>,
    /// Its context length, when the checkpoint says.
    pub context: Option<usize>,
}

/// Prepares requests for one model under one set of limits.
pub struct Preparer {
    facts: ModelFacts,
    limits: Limits,
    /// Built on first use (the token trie takes a moment): a server whose
    /// clients never ask for structured output never builds it.
    grammars: OnceLock<Result<Grammars, String>>,
    /// The longest token in bytes: a text of more than `max_prompt_tokens`
    /// times this is too long without tokenizing it.
    longest_token: usize,
}

impl Preparer {
    /// A preparer for the model `facts` describe.
    pub fn new(facts: ModelFacts, limits: Limits) -> Preparer {
        let longest_token = facts.tokenizer.as_ref().map_or(1, |t| t.longest_token_bytes()).max(1);
        Preparer { facts, limits, grammars: OnceLock::new(), longest_token }
    }

    /// The markup the model's template writes tool calls in.
    pub fn tool_format(&self) -> Option<ToolFormat> {
        self.facts.tool_format
    }

    /// The limits requests are held to.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    fn tokenizer(&self) -> Result<&Tokenizer, ApiError> {
        self.facts.tokenizer.as_ref().map_err(|e| ApiError::status(400, e.clone()))
    }

    /// The longest prompt that could be taken, in tokens: the server's
    /// cap, and the model's context when that is shorter (the engine
    /// checks the context exactly, with its own message).
    fn max_tokens(&self) -> usize {
        self.facts.context.map_or(self.limits.max_prompt_tokens, |c| c.min(self.limits.max_prompt_tokens))
    }

    fn too_long(&self, what: &str) -> ApiError {
        let cap = self.max_tokens();
        ApiError::status(
            413,
            format!("the prompt is {what}, over the {cap} tokens this server takes (--max-prompt-tokens)"),
        )
    }

    /// Text of `bytes` bytes cannot fit the cap (every token is at most
    /// the longest token's bytes): refused before it is tokenized.
    fn check_text_size(&self, bytes: usize) -> Result<(), ApiError> {
        if bytes > self.max_tokens().saturating_mul(self.longest_token) {
            return Err(self.too_long(&format!("{bytes} bytes of text")));
        }
        Ok(())
    }

    /// Makes `spec` ready for the engine, or says in one line why not.
    pub fn prepare(&self, spec: &JobSpec) -> Result<Prepared, ApiError> {
        if spec.media.len() > self.limits.max_media_items {
            return Err(ApiError::bad(
                "messages",
                format!(
                    "the request holds {} images and clips, over the {} this server takes (--max-media-items)",
                    spec.media.len(),
                    self.limits.max_media_items
                ),
            ));
        }
        let (ids, in_think) = match &spec.prompt {
            PromptSource::Ids(ids) => (ids.clone(), false),
            PromptSource::Text(t) => {
                self.check_text_size(t.len())?;
                (self.tokenizer()?.encode(t, true).map_err(|e| ApiError::bad("prompt", e.to_string()))?, false)
            }
            PromptSource::Chat { messages, tools, kwargs } => {
                // Each message renders to a token at least.
                if messages.len() > self.max_tokens() {
                    return Err(self.too_long(&format!("{} messages", messages.len())));
                }
                let tok = self.tokenizer()?;
                let text = render_chat(tok, messages, tools.as_deref(), kwargs)
                    .map_err(|e| ApiError::bad("messages", format!("{e:#}")))?;
                self.check_text_size(text.len())?;
                let think = text.trim_end().ends_with("<think>");
                (tok.encode(&text, true).map_err(|e| ApiError::bad("messages", e.to_string()))?, think)
            }
        };
        if ids.is_empty() {
            return Err(ApiError::bad("prompt", "the prompt is empty"));
        }
        if ids.len() > self.limits.max_prompt_tokens {
            return Err(self.too_long(&format!("{} tokens", ids.len())));
        }
        let vocab = self.facts.vocab_size;
        if let Some(&bad) = ids.iter().find(|&&i| i >= vocab) {
            return Err(ApiError::bad("prompt", format!("token id {bad} is outside the vocabulary ({vocab} tokens)")));
        }
        let media = self.decode_media(spec)?;
        let constraint = self.constraint(spec)?;
        Ok(Prepared { ids, in_think, media, constraint })
    }

    /// The request's images and clips decoded, within the media bounds.
    fn decode_media(&self, spec: &JobSpec) -> Result<Vec<DecodedPart>, ApiError> {
        let mut held = 0usize;
        let mut out = Vec::with_capacity(spec.media.len());
        for p in &spec.media {
            if let Some((_, Err(why))) = self.facts.media.iter().find(|(k, _)| *k == p.kind) {
                return Err(ApiError::bad(&p.param, why.clone()));
            }
            let decoded = Decoded::from_bytes(p.kind, &p.data, &p.param)
                .map_err(|e| ApiError::bad(&p.param, format!("{e:#}")))?;
            held = held.saturating_add(decoded.bytes());
            if held > self.limits.max_media_bytes {
                return Err(ApiError::status(
                    413,
                    format!(
                        "the request's images and clips decode to over {} MiB (--max-media-bytes)",
                        self.limits.max_media_bytes >> 20
                    ),
                ));
            }
            out.push(DecodedPart { decoded, param: p.param.clone() });
        }
        Ok(out)
    }

    /// The constraint a request needs: its response format, or a required
    /// tool call; compiled, and checked to allow some output.
    fn constraint(&self, spec: &JobSpec) -> Result<Option<GrammarConstraint>, ApiError> {
        let (g, param) = match (&spec.grammar, &spec.prompt) {
            (Some(g), _) => (g.clone(), "response_format"),
            (None, PromptSource::Chat { tools: Some(tools), .. })
                if matches!(spec.tool_choice, ToolChoice::Required | ToolChoice::Named(_)) =>
            {
                let Some(format) = self.facts.tool_format else {
                    return Err(ApiError::bad(
                        "tool_choice",
                        "this model's chat template has no tool-call markup to require",
                    ));
                };
                let tok = self.tokenizer()?;
                let single = |s: &str| match tok.encode(s, false) {
                    Ok(ids) if ids.len() == 1 => Some(ids[0]),
                    _ => None,
                };
                (Grammar::Lark(call_grammar(format, tools, &spec.tool_choice, single)?), "tools")
            }
            _ => return Ok(None),
        };
        let grammars = self.grammars.get_or_init(|| {
            let tok = self.facts.tokenizer.as_ref().map_err(String::clone)?;
            Grammars::new(tok, self.facts.eos).map_err(|e| format!("{e:#}"))
        });
        let grammars = grammars.as_ref().map_err(|e| ApiError::bad(param, e.clone()))?;
        let mut m = grammars.matcher(&g).map_err(|e| ApiError::bad(param, format!("{e:#}")))?;
        // A grammar no text satisfies fails here, as the client's error,
        // rather than at the first token as the server's.
        m.check_start().map_err(|e| ApiError::bad(param, format!("{e:#}")))?;
        Ok(Some(m))
    }
}
