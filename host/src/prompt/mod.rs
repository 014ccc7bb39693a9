//! Turning user text (with images and audio) into prompt token ids: chat
//! template (or raw), BOS rule, media placeholders expanded as the
//! reference processors expand them.

mod media;

pub use media::{expand_markers, load_audio_clips, load_images, takes_kind, Decoded, MediaKind, Prompt, PromptMedia};

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
    /// Images and audio clips attached to the turn (placed before its
    /// text, images first, as mlx-vlm's prompt helper places them).
    pub media: Vec<Rc<PromptMedia>>,
}

impl Message {
    /// A text message.
    pub fn new(role: &str, content: &str) -> Self {
        Message { role: role.into(), content: content.into(), media: Vec::new() }
    }

    /// A message with images and/or audio clips.
    pub fn with_media(role: &str, content: &str, media: Vec<Rc<PromptMedia>>) -> Self {
        Message { role: role.into(), content: content.into(), media }
    }

    /// The template's view: a plain string for text (as before media
    /// existed, so text prompts render exactly as they did), content parts
    /// when there are images or clips.
    fn to_json(&self) -> Value {
        if self.media.is_empty() {
            return json!({"role": self.role, "content": self.content});
        }
        let mut ordered: Vec<&Rc<PromptMedia>> = self.media.iter().collect();
        ordered.sort_by_key(|m| m.kind != MediaKind::Image);
        let mut parts: Vec<Value> = ordered.iter().map(|m| json!({"type": m.kind.name()})).collect();
        parts.push(json!({"type": "text", "text": self.content}));
        json!({"role": self.role, "content": parts})
    }
}

/// Renders `messages` with the tokenizer's chat template and encodes them.
/// `extra` carries template kwargs such as `enable_thinking`.
pub fn chat_ids(tok: &Tokenizer, messages: &[Message], extra: &Map<String, Value>) -> Result<Vec<u32>> {
    Ok(chat_prompt(tok, None, messages, extra)?.ids)
}

/// [`chat_ids`] for messages that may carry images and audio: each item's
/// marker in the rendered text is expanded to its placeholder tokens
/// (`media` says how), and the ids are checked against the items.
pub fn chat_prompt(
    tok: &Tokenizer,
    media: Option<&MediaSpec>,
    messages: &[Message],
    extra: &Map<String, Value>,
) -> Result<Prompt> {
    // Each kind in prompt order: per message, images then clips.
    let items: Vec<Rc<PromptMedia>> = messages.iter().flat_map(|m| m.media.iter().cloned()).collect();
    let Some(src) = tok.chat_template() else {
        if !items.is_empty() {
            anyhow::bail!("the tokenizer has no chat template to place images or audio with; pass --prompt-ids with the placeholders expanded");
        }
        // No template: fall back to the plain text of the last user turn.
        let text = messages.iter().map(|m| m.content.as_str()).collect::<Vec<_>>().join("\n");
        return Ok(Prompt::text(tok.encode(&text, true).map_err(|e| anyhow!("{e}"))?));
    };
    let msgs: Vec<Value> = messages.iter().map(Message::to_json).collect();
    let text = render_template(tok, src, &msgs, None, extra)?;
    if text.trim().is_empty() {
        // Generating from nothing would give an answer to no question.
        anyhow::bail!("the chat template rendered an empty prompt; pass --raw to send the text as it is");
    }
    let mut ids = tok.encode(&text, true).map_err(|e| anyhow!("{e}"))?;
    if let Some(spec) = media.filter(|_| !items.is_empty()) {
        ids = expand_markers(&ids, spec, &items)?;
    }
    Prompt::with_media(ids, media, items)
}

/// Renders `messages` (in the template's JSON view, tool calls and all)
/// and `tools` with the tokenizer's chat template, ready for the reply.
pub fn render_chat(
    tok: &Tokenizer,
    messages: &[Value],
    tools: Option<&[Value]>,
    extra: &Map<String, Value>,
) -> Result<String> {
    let src = tok.chat_template().ok_or_else(|| anyhow!("the model's tokenizer has no chat template"))?;
    render_template(tok, src, messages, tools, extra)
}

fn render_template(
    tok: &Tokenizer,
    src: &str,
    messages: &[Value],
    tools: Option<&[Value]>,
    extra: &Map<String, Value>,
) -> Result<String> {
    let bos = tok.bos_token().map(|(s, _)| s);
    let eos = tok.eos_ids().first().and_then(|&i| tok.decode(&[i], false).ok());
    let tpl = ChatTemplate::with_origin(src, bos.as_deref(), eos.as_deref(), tok.chat_template_origin())
        .map_err(|e| anyhow!("{e}"))?;
    tpl.render(messages, tools, true, extra).map_err(|e| anyhow!("{e}"))
}

/// Parses `--prompt-ids 1,2,3`.
pub fn parse_ids(s: &str) -> Result<Vec<u32>> {
    s.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| t.parse::<u32>().map_err(|_| anyhow!("--prompt-ids: `{t}` is not a token id")))
        .collect()
}
