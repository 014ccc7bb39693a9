//! The OpenAI request bodies, checked into what the engine runs
//! ([`super::job::request`]), and the error shape every failure is answered with.

pub use super::error::ApiError;
use super::tools::ToolChoice;
use crate::decode::LogitsParams;
use crate::grammar::Grammar;
use crate::prompt::MediaKind;
use crate::sample::SamplerParams;
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Map, Value};

/// Where a job's prompt comes from.
#[derive(Debug, Clone)]
pub enum PromptSource {
    /// Chat messages (OpenAI's shape) rendered by the chat template.
    Chat {
        /// The messages, as the template sees them.
        messages: Vec<Value>,
        /// Tool schemas for the template.
        tools: Option<Vec<Value>>,
        /// Extra template kwargs (`chat_template_kwargs`).
        kwargs: Map<String, Value>,
    },
    /// Raw text (`/v1/completions`).
    Text(String),
    /// Token ids (`/v1/completions` with an array prompt).
    Ids(Vec<u32>),
}

/// An image or audio clip of a chat message, still encoded (the engine
/// decodes it for the model at hand).
#[derive(Debug, Clone)]
pub struct MediaPart {
    /// Image or audio.
    pub kind: MediaKind,
    /// The file's bytes (PNG, JPEG, WebP, GIF; WAV).
    pub data: Vec<u8>,
    /// Where it sits in the request (`messages[1].content[0]`), for errors.
    pub param: String,
}

/// A checked request: what the engine needs to run it.
#[derive(Debug, Clone)]
pub struct JobSpec {
    /// The prompt.
    pub prompt: PromptSource,
    /// Most tokens to generate (`None`: up to the context or the server's default).
    pub max_tokens: Option<usize>,
    /// Sampling.
    pub sampler: SamplerParams,
    /// Seed for this request's sampling.
    pub seed: Option<u64>,
    /// Stop strings.
    pub stop: Vec<String>,
    /// Bias and penalties.
    pub logits: LogitsParams,
    /// Log-probabilities: alternatives per token.
    pub logprobs: Option<usize>,
    /// Output constraint.
    pub grammar: Option<Grammar>,
    /// What the tools may or must do.
    pub tool_choice: ToolChoice,
    /// A chat request (reasoning and tool calls are split out of the text).
    pub chat: bool,
    /// Stream the answer.
    pub stream: bool,
    /// Send a usage chunk at the end of a stream.
    pub include_usage: bool,
    /// Echo the prompt before the completion (`/v1/completions`).
    pub echo: bool,
    /// The images and clips of the messages, in prompt order.
    pub media: Vec<MediaPart>,
}

/// Fields both endpoints take.
#[derive(Debug, Deserialize, Default)]
struct Common {
    model: Option<String>,
    max_tokens: Option<i64>,
    max_completion_tokens: Option<i64>,
    temperature: Option<f32>,
    top_p: Option<f32>,
    top_k: Option<i32>,
    min_p: Option<f32>,
    seed: Option<i64>,
    stop: Option<Value>,
    presence_penalty: Option<f32>,
    frequency_penalty: Option<f32>,
    repetition_penalty: Option<f32>,
    repetition_context_size: Option<usize>,
    logit_bias: Option<Map<String, Value>>,
    n: Option<i64>,
    stream: Option<bool>,
    stream_options: Option<Value>,
    response_format: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct ChatBody {
    messages: Vec<Value>,
    tools: Option<Vec<Value>>,
    tool_choice: Option<Value>,
    chat_template_kwargs: Option<Map<String, Value>>,
    logprobs: Option<bool>,
    top_logprobs: Option<i64>,
    #[serde(flatten)]
    common: Common,
}

#[derive(Debug, Deserialize)]
struct CompletionBody {
    prompt: Value,
    logprobs: Option<i64>,
    echo: Option<bool>,
    #[serde(flatten)]
    common: Common,
}

fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::status(400, format!("the request body is not valid: {e}")))
}

/// The model a request names, if any.
pub fn requested_model(body: &[u8]) -> Option<String> {
    serde_json::from_slice::<Value>(body).ok()?.get("model")?.as_str().map(str::to_string)
}

/// Checks a `/v1/chat/completions` body.
pub fn chat(body: &[u8]) -> Result<JobSpec, ApiError> {
    let b: ChatBody = parse(body)?;
    if b.messages.is_empty() {
        return Err(ApiError::bad("messages", "`messages` must hold at least one message"));
    }
    let mut media = Vec::new();
    let messages =
        b.messages.iter().enumerate().map(|(i, m)| message(i, m, &mut media)).collect::<Result<Vec<_>, _>>()?;
    let tool_choice = ToolChoice::parse(b.tool_choice.as_ref(), b.tools.as_deref())?;
    let top = match (b.logprobs, b.top_logprobs) {
        (Some(true), k) => Some(check_range("top_logprobs", k.unwrap_or(0), 0, 20)? as usize),
        (_, Some(_)) => return Err(ApiError::bad("top_logprobs", "`top_logprobs` needs `logprobs: true`")),
        _ => None,
    };
    let tools = b.tools.filter(|t| !t.is_empty() && tool_choice != ToolChoice::None);
    let prompt = PromptSource::Chat { messages, tools, kwargs: b.chat_template_kwargs.unwrap_or_default() };
    let mut spec = common(b.common, prompt, top, tool_choice, true, false)?;
    spec.media = media;
    Ok(spec)
}

/// Checks a `/v1/completions` body.
pub fn completion(body: &[u8]) -> Result<JobSpec, ApiError> {
    let b: CompletionBody = parse(body)?;
    let prompt = match &b.prompt {
        Value::String(s) => PromptSource::Text(s.clone()),
        Value::Array(a) if a.len() == 1 && a[0].is_string() => PromptSource::Text(a[0].as_str().unwrap_or("").into()),
        Value::Array(a) if !a.is_empty() && a.iter().all(|v| v.as_u64().is_some_and(|n| n <= u32::MAX as u64)) => {
            PromptSource::Ids(a.iter().filter_map(Value::as_u64).map(|n| n as u32).collect())
        }
        Value::Array(a) if a.len() > 1 => {
            return Err(ApiError::bad("prompt", "one prompt per request: send a string, or an array of token ids"))
        }
        _ => return Err(ApiError::bad("prompt", "`prompt` must be a string or an array of token ids")),
    };
    let top = match b.logprobs {
        Some(k) => Some(check_range("logprobs", k, 0, 20)? as usize),
        None => None,
    };
    let mut spec = common(b.common, prompt, top, ToolChoice::None, false, b.echo.unwrap_or(false))?;
    spec.chat = false;
    Ok(spec)
}

fn check_range(param: &str, v: i64, lo: i64, hi: i64) -> Result<i64, ApiError> {
    if v < lo || v > hi {
        return Err(ApiError::bad(param, format!("`{param}` must be between {lo} and {hi}, got {v}")));
    }
    Ok(v)
}

/// One chat message, checked: its role, and its content as the template
/// takes it (text parts joined into a string; with images or clips, parts
/// in their order, each item a `{"type": "image"}` or `{"type": "audio"}`
/// part whose bytes go to `media`).
fn message(i: usize, m: &Value, media: &mut Vec<MediaPart>) -> Result<Value, ApiError> {
    let param = format!("messages[{i}]");
    let Some(obj) = m.as_object() else {
        return Err(ApiError::bad(&param, format!("`{param}` must be an object")));
    };
    let role = obj.get("role").and_then(Value::as_str).unwrap_or("");
    if !["system", "developer", "user", "assistant", "tool"].contains(&role) {
        return Err(ApiError::bad(
            &format!("{param}.role"),
            format!("`{param}.role` must be system, developer, user, assistant or tool, got {:?}", role),
        ));
    }
    let mut out = obj.clone();
    if role == "developer" {
        out.insert("role".into(), "system".into());
    }
    match obj.get("content") {
        None | Some(Value::Null) if role == "assistant" => {
            out.insert("content".into(), "".into());
        }
        Some(Value::String(_)) => {}
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            let mut shown = Vec::new();
            let before = media.len();
            for (j, p) in parts.iter().enumerate() {
                let at = format!("{param}.content[{j}]");
                match p.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        let t = p.get("text").and_then(Value::as_str).ok_or_else(|| {
                            ApiError::bad(&format!("{at}.text"), format!("`{at}.text` must be a string"))
                        })?;
                        text.push_str(t);
                        shown.push(serde_json::json!({"type": "text", "text": t}));
                    }
                    Some("image_url") => {
                        let url = p.get("image_url").and_then(|u| u.get("url").or(Some(u))).and_then(Value::as_str);
                        let data = data_url(url, &at)?;
                        media.push(MediaPart { kind: MediaKind::Image, data, param: at });
                        shown.push(serde_json::json!({"type": "image"}));
                    }
                    Some("input_audio") => {
                        let a = p.get("input_audio");
                        let format = a.and_then(|a| a.get("format")).and_then(Value::as_str).unwrap_or("wav");
                        if !format.eq_ignore_ascii_case("wav") {
                            return Err(ApiError::bad(
                                &format!("{at}.input_audio.format"),
                                format!("audio format {format:?} is not read: send WAV"),
                            ));
                        }
                        let b64 = a.and_then(|a| a.get("data")).and_then(Value::as_str).ok_or_else(|| {
                            ApiError::bad(&format!("{at}.input_audio.data"), "`input_audio.data` must be base64 text")
                        })?;
                        let data = base64_bytes(b64, &format!("{at}.input_audio.data"))?;
                        media.push(MediaPart { kind: MediaKind::Audio, data, param: at });
                        shown.push(serde_json::json!({"type": "audio"}));
                    }
                    other => return Err(ApiError::bad(&at, format!("unknown content part type {other:?}"))),
                }
            }
            let content = if media.len() > before { Value::Array(shown) } else { text.into() };
            out.insert("content".into(), content);
        }
        _ => {
            return Err(ApiError::bad(
                &format!("{param}.content"),
                format!("`{param}.content` must be a string or parts"),
            ))
        }
    }
    // Templates read tool-call arguments as objects; OpenAI sends them as JSON text.
    if let Some(Value::Array(calls)) = out.get_mut("tool_calls") {
        for c in calls {
            if let Some(f) = c.get_mut("function") {
                if let Some(Value::String(a)) = f.get("arguments") {
                    let parsed = serde_json::from_str::<Value>(a).unwrap_or(Value::String(a.clone()));
                    f["arguments"] = parsed;
                }
            }
        }
    }
    Ok(Value::Object(out))
}

fn common(
    c: Common,
    prompt: PromptSource,
    logprobs: Option<usize>,
    tool_choice: ToolChoice,
    chat: bool,
    echo: bool,
) -> Result<JobSpec, ApiError> {
    if let Some(n) = c.n {
        if n != 1 {
            return Err(ApiError::bad("n", format!("only n = 1 is served, got {n}")));
        }
    }
    let max = c.max_completion_tokens.or(c.max_tokens);
    if let Some(m) = max {
        if m < 1 {
            let p = if c.max_completion_tokens.is_some() { "max_completion_tokens" } else { "max_tokens" };
            return Err(ApiError::bad(p, format!("`{p}` must be at least 1, got {m}")));
        }
    }
    let temperature = c.temperature.unwrap_or(1.0);
    if !(temperature.is_finite() && (0.0..=2.0).contains(&temperature)) {
        return Err(ApiError::bad("temperature", format!("`temperature` must be between 0 and 2, got {temperature}")));
    }
    let top_p = c.top_p.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::bad("top_p", format!("`top_p` must be in (0, 1], got {top_p}")));
    }
    let min_p = c.min_p.unwrap_or(0.0);
    if !(0.0..=1.0).contains(&min_p) {
        return Err(ApiError::bad("min_p", format!("`min_p` must be in [0, 1], got {min_p}")));
    }
    let top_k = c.top_k.unwrap_or(0).max(0);
    if c.top_k.is_some_and(|k| k < -1) {
        return Err(ApiError::bad("top_k", "`top_k` must be ≥ 0 (or -1: off)"));
    }
    for (name, v) in [("presence_penalty", c.presence_penalty), ("frequency_penalty", c.frequency_penalty)] {
        if let Some(v) = v {
            if !(v.is_finite() && (-2.0..=2.0).contains(&v)) {
                return Err(ApiError::bad(name, format!("`{name}` must be between -2 and 2, got {v}")));
            }
        }
    }
    if let Some(r) = c.repetition_penalty {
        if !(r.is_finite() && r > 0.0) {
            return Err(ApiError::bad("repetition_penalty", format!("`repetition_penalty` must be > 0, got {r}")));
        }
    }
    let mut bias = Vec::new();
    for (k, v) in c.logit_bias.iter().flatten() {
        let id = k
            .parse::<u32>()
            .map_err(|_| ApiError::bad("logit_bias", format!("`logit_bias` key {k:?} is not a token id")))?;
        let b = v.as_f64().filter(|b| (-100.0..=100.0).contains(b)).ok_or_else(|| {
            ApiError::bad("logit_bias", format!("`logit_bias[{k}]` must be a number between -100 and 100"))
        })?;
        bias.push((id, b as f32));
    }
    let stop = match c.stop {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s],
        Some(Value::Array(a)) if a.len() <= 16 && a.iter().all(Value::is_string) => {
            a.iter().filter_map(Value::as_str).map(str::to_string).collect()
        }
        Some(_) => return Err(ApiError::bad("stop", "`stop` must be a string or an array of at most 16 strings")),
    };
    if stop.iter().any(String::is_empty) {
        return Err(ApiError::bad("stop", "`stop` strings must not be empty"));
    }
    let include_usage =
        c.stream_options.as_ref().and_then(|o| o.get("include_usage")).and_then(Value::as_bool).unwrap_or(false);
    let grammar = response_format(c.response_format.as_ref())?;
    if grammar.is_some() && matches!(tool_choice, ToolChoice::Required | ToolChoice::Named(_)) {
        return Err(ApiError::bad(
            "response_format",
            "`response_format` and a required `tool_choice` exclude each other",
        ));
    }
    let _ = c.model;
    Ok(JobSpec {
        prompt,
        max_tokens: max.map(|m| m as usize),
        sampler: SamplerParams { temperature, top_p, top_k, min_p },
        seed: c.seed.map(|s| s as u64),
        stop,
        logits: LogitsParams {
            bias,
            repetition_penalty: c.repetition_penalty.filter(|&r| r != 1.0),
            presence_penalty: c.presence_penalty.filter(|&p| p != 0.0),
            frequency_penalty: c.frequency_penalty.filter(|&p| p != 0.0),
            context_size: c.repetition_context_size.unwrap_or(20).max(1),
        },
        logprobs,
        grammar,
        tool_choice,
        chat,
        stream: c.stream.unwrap_or(false),
        include_usage,
        echo,
        media: Vec::new(),
    })
}

/// The bytes of a `data:` URL (`data:image/png;base64,...`). Remote URLs
/// are refused: the server fetches nothing on a client's behalf.
fn data_url(url: Option<&str>, at: &str) -> Result<Vec<u8>, ApiError> {
    let param = format!("{at}.image_url.url");
    let url = url.ok_or_else(|| ApiError::bad(&param, "`image_url` needs a `url`"))?;
    let Some(rest) = url.strip_prefix("data:") else {
        let shown: String = url.chars().take(40).collect();
        return Err(ApiError::bad(&param, format!("only data: URLs are taken (base64 image bytes), got {shown:?}")));
    };
    let (head, b64) =
        rest.split_once(',').ok_or_else(|| ApiError::bad(&param, "the data: URL has no `,` before its data"))?;
    if !head.ends_with(";base64") {
        return Err(ApiError::bad(&param, "the data: URL must be base64 (`data:image/png;base64,...`)"));
    }
    base64_bytes(b64, &param)
}

fn base64_bytes(b64: &str, param: &str) -> Result<Vec<u8>, ApiError> {
    let clean: String = b64.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    // Padding or none: both are seen in the wild.
    base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(clean.trim_end_matches('='))
        .map_err(|e| ApiError::bad(param, format!("not base64: {e}")))
}

/// `response_format`: text, json_object, json_schema, and famlx's `regex`
/// and `grammar` (Lark) extensions.
fn response_format(f: Option<&Value>) -> Result<Option<Grammar>, ApiError> {
    let Some(f) = f.filter(|f| !f.is_null()) else { return Ok(None) };
    let kind = f.get("type").and_then(Value::as_str).unwrap_or("");
    let field = |name: &str| f.get(name).or_else(|| f.get(kind).and_then(|o| o.get(name)));
    Ok(match kind {
        "text" => None,
        "json_object" => Some(Grammar::JsonObject),
        "json_schema" => {
            let schema = f
                .get("json_schema")
                .and_then(|s| s.get("schema"))
                .filter(|s| s.is_object() || s.is_boolean())
                .ok_or_else(|| {
                    ApiError::bad("response_format.json_schema.schema", "`json_schema` needs a `schema` object")
                })?;
            Some(Grammar::JsonSchema(schema.clone()))
        }
        "regex" => Some(Grammar::Regex(
            field("regex")
                .or_else(|| field("pattern"))
                .and_then(Value::as_str)
                .ok_or_else(|| ApiError::bad("response_format.regex", "`regex` needs a `regex` string"))?
                .to_string(),
        )),
        "grammar" | "lark" => Some(Grammar::Lark(
            field("grammar")
                .or_else(|| field("lark"))
                .and_then(Value::as_str)
                .ok_or_else(|| ApiError::bad("response_format.grammar", "`grammar` needs a `grammar` string (Lark)"))?
                .to_string(),
        )),
        other => {
            return Err(ApiError::bad(
                "response_format.type",
                format!(
                    "`response_format.type` must be text, json_object, json_schema, regex or grammar, got {other:?}"
                ),
            ))
        }
    })
}
