//! Turning user text (and images) into prompt token ids: chat template (or
//! raw), BOS rule, image placeholders expanded as the reference processors
//! expand them.

mod images;

pub use images::{expand_markers, image_spans, load_images, Prompt, PromptImage};

use anyhow::{anyhow, Result};
use famlx_text::{ChatTemplate, Tokenizer};
use plugin_api::MediaSpec;
use serde_json::{json, Map, Value};
use std::rc::Rc;

/// A conversation turn.
#[derive(Debug, Clone)]
pub struct Message {
    /// "system", "user", "assistant", "tool".
    pub role: String,
    /// Text.
    pub content: String,
    /// Images attached to the turn (placed before its text, as mlx-vlm's
    /// prompt helper places them).
    pub images: Vec<Rc<PromptImage>>,
}

impl Message {
    /// A text message.
    pub fn new(role: &str, content: &str) -> Self {
        Message { role: role.into(), content: content.into(), images: Vec::new() }
    }

    /// A message with images.
    pub fn with_images(role: &str, content: &str, images: Vec<Rc<PromptImage>>) -> Self {
        Message { role: role.into(), content: content.into(), images }
    }

    /// The template's view: a plain string for text (as before images
    /// existed, so text prompts render exactly as they did), content parts
    /// when there are images.
    fn to_json(&self) -> Value {
        if self.images.is_empty() {
            return json!({"role": self.role, "content": self.content});
        }
        let mut parts: Vec<Value> = self.images.iter().map(|_| json!({"type": "image"})).collect();
        parts.push(json!({"type": "text", "text": self.content}));
        json!({"role": self.role, "content": parts})
    }
}

/// Renders `messages` with the tokenizer's chat template and encodes them.
/// `extra` carries template kwargs such as `enable_thinking`.
pub fn chat_ids(tok: &Tokenizer, messages: &[Message], extra: &Map<String, Value>) -> Result<Vec<u32>> {
    Ok(chat_prompt(tok, None, messages, extra)?.ids)
}

/// [`chat_ids`] for messages that may carry images: each image's marker in
/// the rendered text is expanded to its placeholder tokens (`media` says
/// how), and the ids are checked against the images.
pub fn chat_prompt(
    tok: &Tokenizer,
    media: Option<&MediaSpec>,
    messages: &[Message],
    extra: &Map<String, Value>,
) -> Result<Prompt> {
    let images: Vec<Rc<PromptImage>> = messages.iter().flat_map(|m| m.images.iter().cloned()).collect();
    let Some(src) = tok.chat_template() else {
        if !images.is_empty() {
            anyhow::bail!("the tokenizer has no chat template to place images with; pass --prompt-ids with the placeholders expanded");
        }
        // No template: fall back to the plain text of the last user turn.
        let text = messages.iter().map(|m| m.content.as_str()).collect::<Vec<_>>().join("\n");
        return Ok(Prompt::text(tok.encode(&text, true).map_err(|e| anyhow!("{e}"))?));
    };
    let bos = tok.bos_token().map(|(s, _)| s);
    let eos = tok.eos_ids().first().and_then(|&i| tok.decode(&[i], false).ok());
    let tpl = ChatTemplate::with_origin(src, bos.as_deref(), eos.as_deref(), tok.chat_template_origin())
        .map_err(|e| anyhow!("{e}"))?;
    let msgs: Vec<Value> = messages.iter().map(Message::to_json).collect();
    let text = tpl.render(&msgs, None, true, extra).map_err(|e| anyhow!("{e}"))?;
    if text.trim().is_empty() {
        // Generating from nothing would give an answer to no question.
        anyhow::bail!("the chat template rendered an empty prompt; pass --raw to send the text as it is");
    }
    let mut ids = tok.encode(&text, true).map_err(|e| anyhow!("{e}"))?;
    if let Some(spec) = media.filter(|_| !images.is_empty()) {
        ids = expand_markers(&ids, spec, &images)?;
    }
    Prompt::with_images(ids, media, images)
}

/// Parses `--prompt-ids 1,2,3`.
pub fn parse_ids(s: &str) -> Result<Vec<u32>> {
    s.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| t.parse::<u32>().map_err(|_| anyhow!("--prompt-ids: `{t}` is not a token id")))
        .collect()
}
