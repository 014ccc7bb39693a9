//! Turning user text into prompt token ids: chat template (or raw), BOS rule.

use anyhow::{anyhow, Result};
use famlx_text::{ChatTemplate, Tokenizer};
use serde_json::{json, Map, Value};

/// A conversation turn.
#[derive(Debug, Clone)]
pub struct Message {
    /// "system", "user", "assistant", "tool".
    pub role: String,
    /// Text.
    pub content: String,
}

impl Message {
    /// A message.
    pub fn new(role: &str, content: &str) -> Self {
        Message { role: role.into(), content: content.into() }
    }
}

/// Renders `messages` with the tokenizer's chat template and encodes them.
/// `extra` carries template kwargs such as `enable_thinking`.
pub fn chat_ids(tok: &Tokenizer, messages: &[Message], extra: &Map<String, Value>) -> Result<Vec<u32>> {
    let Some(src) = tok.chat_template() else {
        // No template: fall back to the plain text of the last user turn.
        let text = messages.iter().map(|m| m.content.as_str()).collect::<Vec<_>>().join("\n");
        return tok.encode(&text, true).map_err(|e| anyhow!("{e}"));
    };
    let bos = tok.bos_token().map(|(s, _)| s);
    let eos = tok.eos_ids().first().and_then(|&i| tok.decode(&[i], false).ok());
    let tpl = ChatTemplate::with_origin(src, bos.as_deref(), eos.as_deref(), tok.chat_template_origin())
        .map_err(|e| anyhow!("{e}"))?;
    let msgs: Vec<Value> = messages.iter().map(|m| json!({"role": m.role, "content": m.content})).collect();
    let text = tpl.render(&msgs, None, true, extra).map_err(|e| anyhow!("{e}"))?;
    if text.trim().is_empty() {
        // Generating from nothing would give an answer to no question.
        anyhow::bail!("the chat template rendered an empty prompt; pass --raw to send the text as it is");
    }
    tok.encode(&text, true).map_err(|e| anyhow!("{e}"))
}

/// Parses `--prompt-ids 1,2,3`.
pub fn parse_ids(s: &str) -> Result<Vec<u32>> {
    s.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| t.parse::<u32>().map_err(|_| anyhow!("--prompt-ids: `{t}` is not a token id")))
        .collect()
}
