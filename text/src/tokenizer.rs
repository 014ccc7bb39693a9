//! The tokenizer: a Hugging Face `tokenizers` pipeline plus what transformers reads from the
//! config files around it (BOS/EOS, whether to add BOS, the chat template).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

use famlx_formats::input;

use crate::detok::StreamingDetokenizer;
use crate::error::{Error, Result};
use crate::gguf::{self, MetaValue};
use crate::special::{is_end_token_name, push_unique};
use crate::template::ChatTemplate;

/// A tokenizer with its BOS/EOS conventions and chat template.
#[derive(Clone)]
pub struct Tokenizer {
    inner: Arc<tokenizers::Tokenizer>,
    bos: Option<(String, u32)>,
    eos_token: Option<String>,
    eos_ids: Vec<u32>,
    add_bos: bool,
    /// Whether `add_bos` came from the tokenizer itself (a config flag or a
    /// post-processor that inserts BOS) rather than a default.
    add_bos_declared: bool,
    chat_template: Option<String>,
    named_templates: Vec<(String, String)>,
    /// Sorted ids of special added tokens.
    special_ids: Arc<Vec<u32>>,
    /// Where the tokenizer came from, for error messages.
    origin: String,
    /// Where the chat template came from, for error messages.
    template_origin: String,
    /// What was ignored while loading (e.g. an empty chat template file).
    warnings: Vec<String>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("origin", &self.origin)
            .field("vocab_size", &self.vocab_size())
            .field("bos", &self.bos)
            .field("eos_ids", &self.eos_ids)
            .field("add_bos", &self.add_bos)
            .field("has_chat_template", &self.chat_template.is_some())
            .finish()
    }
}

/// Reads an optional JSON side file (a regular file, up to
/// [`input::MAX_JSON`]); `Ok(None)` when it does not exist.
fn read_json_opt(path: &Path) -> Result<Option<Value>> {
    let bytes = match input::read_input(path, "a JSON side file", input::MAX_JSON) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::new(format!("{}: cannot read: {e}", path.display()))),
    };
    serde_json::from_slice(&bytes).map(Some).map_err(|e| Error::new(format!("{}: not valid JSON: {e}", path.display())))
}

/// A special-token entry: a plain string or an AddedToken object `{"content": ..}`.
fn token_string(v: Option<&Value>, file: &Path, field: &str) -> Result<Option<String>> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Object(o)) => match o.get("content") {
            Some(Value::String(s)) => Ok(Some(s.clone())),
            _ => Err(Error::new(format!("{}: {field} has no string \"content\"", file.display()))),
        },
        Some(_) => Err(Error::new(format!("{}: {field} must be a string or an object", file.display()))),
    }
}

/// The only field of tokenizer.json we read ourselves (serde skips the rest cheaply).
#[derive(serde::Deserialize)]
struct TokenizerJsonHead {
    #[serde(default)]
    post_processor: Option<Value>,
}

/// The special token a `TemplateProcessing` post-processor puts first, if any: that is the
/// tokenizer asking for BOS when the config does not say.
fn post_processor_bos(pp: &Value) -> Option<String> {
    match pp.get("type")?.as_str()? {
        "Sequence" => pp.get("processors")?.as_array()?.iter().find_map(post_processor_bos),
        "TemplateProcessing" => {
            let first = pp.get("single")?.as_array()?.first()?;
            let id = first.get("SpecialToken")?.get("id")?.as_str()?;
            Some(id.to_string())
        }
        _ => None,
    }
}

fn special_ids(t: &tokenizers::Tokenizer) -> Arc<Vec<u32>> {
    let mut ids: Vec<u32> =
        t.get_added_tokens_decoder().into_iter().filter(|(_, t)| t.special).map(|(id, _)| id).collect();
    ids.sort_unstable();
    Arc::new(ids)
}

impl Tokenizer {
    /// Loads `tokenizer.json` + `tokenizer_config.json` (and `special_tokens_map.json`,
    /// `generation_config.json`, `chat_template.jinja` / `chat_template.json` when present)
    /// from a checkpoint folder.
    pub fn from_dir(dir: &Path) -> Result<Tokenizer> {
        let tok_path = dir.join("tokenizer.json");
        let bytes = input::read_input(&tok_path, "a tokenizer.json", input::MAX_TOKENIZER).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::new(format!("{}: not found (a checkpoint folder needs tokenizer.json)", tok_path.display()))
            } else {
                Error::new(format!("{}: cannot read: {e}", tok_path.display()))
            }
        })?;
        let head: TokenizerJsonHead = serde_json::from_slice(&bytes)
            .map_err(|e| Error::new(format!("{}: not valid JSON: {e}", tok_path.display())))?;
        let inner = crate::guard::guarded(|| tokenizers::Tokenizer::from_bytes(&bytes))
            .map_err(|e| Error::new(format!("{}: {e}", tok_path.display())))?
            .map_err(|e| {
                Error::new(format!("{}: not a tokenizer the tokenizers library can load: {e}", tok_path.display()))
            })?;
        drop(bytes);

        let cfg_path = dir.join("tokenizer_config.json");
        let cfg = read_json_opt(&cfg_path)?.unwrap_or(Value::Object(Default::default()));
        if !cfg.is_object() {
            return Err(Error::new(format!("{}: must be a JSON object", cfg_path.display())));
        }
        let map_path = dir.join("special_tokens_map.json");
        let special_map = read_json_opt(&map_path)?;
        let gen_path = dir.join("generation_config.json");
        let gen = read_json_opt(&gen_path)?;

        // Special token strings: tokenizer_config first, special_tokens_map as a fallback.
        let pick = |field: &str| -> Result<Option<String>> {
            if let Some(s) = token_string(cfg.get(field), &cfg_path, field)? {
                return Ok(Some(s));
            }
            match &special_map {
                Some(m) => token_string(m.get(field), &map_path, field),
                None => Ok(None),
            }
        };
        let mut bos_token = pick("bos_token")?;
        let eos_token = pick("eos_token")?;

        let pp_bos = head.post_processor.as_ref().and_then(post_processor_bos);
        let add_bos_declared = matches!(cfg.get("add_bos_token"), Some(Value::Bool(_))) || pp_bos.is_some();
        let add_bos = match cfg.get("add_bos_token") {
            Some(Value::Bool(b)) => *b,
            None | Some(Value::Null) => pp_bos.is_some(),
            Some(_) => return Err(Error::new(format!("{}: add_bos_token must be a bool", cfg_path.display()))),
        };
        if bos_token.is_none() && add_bos {
            bos_token = pp_bos;
        }
        let bos = match bos_token {
            Some(t) => match inner.token_to_id(&t) {
                Some(id) => Some((t, id)),
                None => {
                    return Err(Error::new(format!(
                        "{}: bos_token {t:?} is not in the vocabulary of tokenizer.json",
                        cfg_path.display()
                    )))
                }
            },
            None => None,
        };

        let mut eos_ids = Vec::new();
        if let Some(t) = &eos_token {
            match inner.token_to_id(t) {
                Some(id) => eos_ids.push(id),
                None => {
                    return Err(Error::new(format!(
                        "{}: eos_token {t:?} is not in the vocabulary of tokenizer.json",
                        cfg_path.display()
                    )))
                }
            }
        }
        if let Some(g) = &gen {
            let bad = || Error::new(format!("{}: eos_token_id must be an id or a list of ids", gen_path.display()));
            match g.get("eos_token_id") {
                None | Some(Value::Null) => {}
                Some(Value::Number(n)) => push_unique(&mut eos_ids, n.as_u64().ok_or_else(bad)? as u32),
                Some(Value::Array(a)) => {
                    for v in a {
                        push_unique(&mut eos_ids, v.as_u64().ok_or_else(bad)? as u32);
                    }
                }
                Some(_) => return Err(bad()),
            }
        }
        let mut specials: Vec<(u32, String)> = inner
            .get_added_tokens_decoder()
            .into_iter()
            .filter(|(_, t)| t.special && is_end_token_name(&t.content))
            .map(|(id, t)| (id, t.content))
            .collect();
        specials.sort();
        for (id, _) in specials {
            push_unique(&mut eos_ids, id);
        }

        // The chat template: tokenizer_config's, overridden by a chat_template.jinja file (as
        // transformers does), else chat_template.json.
        let mut template_origin = cfg_path.display().to_string();
        let mut warnings = Vec::new();
        // An empty template would render every conversation as nothing: it
        // is ignored (with a warning) in favour of the next source.
        let mut empty = |what: String| warnings.push(format!("{what}: empty chat template, ignored"));
        let (mut chat_template, named_templates) = match cfg.get("chat_template") {
            None | Some(Value::Null) => (None, Vec::new()),
            Some(Value::String(s)) if s.trim().is_empty() => {
                empty(cfg_path.display().to_string());
                (None, Vec::new())
            }
            Some(Value::String(s)) => (Some(s.clone()), Vec::new()),
            Some(Value::Array(list)) => {
                let mut named = Vec::new();
                for item in list {
                    let (Some(name), Some(t)) =
                        (item.get("name").and_then(Value::as_str), item.get("template").and_then(Value::as_str))
                    else {
                        return Err(Error::new(format!(
                            "{}: chat_template list entries need \"name\" and \"template\" strings",
                            cfg_path.display()
                        )));
                    };
                    named.push((name.to_string(), t.to_string()));
                }
                let default = named.iter().find(|(n, _)| n == "default").map(|(_, t)| t.clone());
                (default, named)
            }
            Some(_) => {
                return Err(Error::new(format!(
                    "{}: chat_template must be a string or a list of named templates",
                    cfg_path.display()
                )))
            }
        };
        let jinja_path = dir.join("chat_template.jinja");
        match input::read_input_text(&jinja_path, "a chat template", input::MAX_TEMPLATE) {
            Ok(s) if s.trim().is_empty() => empty(jinja_path.display().to_string()),
            Ok(s) => {
                chat_template = Some(s);
                template_origin = jinja_path.display().to_string();
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let ct_path = dir.join("chat_template.json");
                if chat_template.is_none() {
                    if let Some(v) = read_json_opt(&ct_path)? {
                        match v.get("chat_template") {
                            Some(Value::String(s)) if s.trim().is_empty() => empty(ct_path.display().to_string()),
                            Some(Value::String(s)) => {
                                chat_template = Some(s.clone());
                                template_origin = ct_path.display().to_string();
                            }
                            _ => {
                                return Err(Error::new(format!(
                                    "{}: needs a \"chat_template\" string",
                                    ct_path.display()
                                )))
                            }
                        }
                    }
                }
            }
            Err(e) => return Err(Error::new(format!("{}: cannot read: {e}", jinja_path.display()))),
        }

        let tok = Tokenizer {
            special_ids: special_ids(&inner),
            inner: Arc::new(inner),
            bos,
            eos_token,
            eos_ids,
            add_bos,
            add_bos_declared,
            chat_template,
            named_templates,
            origin: tok_path.display().to_string(),
            template_origin,
            warnings,
        };
        // Compile now so a broken template is reported at load time, naming its file.
        if let Some(src) = &tok.chat_template {
            ChatTemplate::with_origin(src, tok.bos_token_str(), tok.eos_token.as_deref(), &tok.template_origin)?;
        }
        for (name, src) in &tok.named_templates {
            ChatTemplate::with_origin(
                src,
                tok.bos_token_str(),
                tok.eos_token.as_deref(),
                &format!("{} (chat_template {name:?})", cfg_path.display()),
            )?;
        }
        Ok(tok)
    }

    /// Builds the tokenizer from GGUF metadata (`tokenizer.ggml.model`, `.pre`, `.tokens`,
    /// `.merges`, `.scores`, `.token_type`, `.bos_token_id`, `.eos_token_id`, `.eot_token_id`,
    /// `.add_bos_token`, `tokenizer.chat_template`).
    ///
    /// Supported: `gpt2` byte-level BPE with the `smollm`, `gpt2`/`default`, `llama-bpe` and
    /// `qwen2` pre-tokenizers (and aliases), and `llama` SentencePiece vocabularies.
    pub fn from_gguf(meta: &HashMap<String, MetaValue>) -> Result<Tokenizer> {
        let mut g = gguf::build(meta)?;
        let eos_token = g.eos_ids.first().and_then(|&id| g.inner.id_to_token(id));
        let mut warnings = Vec::new();
        if g.chat_template.as_deref().is_some_and(|t| t.trim().is_empty()) {
            warnings.push("GGUF metadata tokenizer.chat_template: empty chat template, ignored".to_string());
            g.chat_template = None;
        }
        if let Some(src) = &g.chat_template {
            ChatTemplate::with_origin(
                src,
                g.bos.as_ref().map(|(s, _)| s.as_str()),
                eos_token.as_deref(),
                "GGUF metadata tokenizer.chat_template",
            )?;
        }
        Ok(Tokenizer {
            special_ids: special_ids(&g.inner),
            inner: Arc::new(g.inner),
            bos: g.bos,
            eos_token,
            eos_ids: g.eos_ids,
            add_bos: g.add_bos,
            add_bos_declared: g.add_bos_declared,
            chat_template: g.chat_template,
            named_templates: Vec::new(),
            origin: "GGUF tokenizer".to_string(),
            template_origin: "GGUF metadata tokenizer.chat_template".to_string(),
            warnings,
        })
    }

    /// Reads a GGUF file's metadata and builds its tokenizer.
    pub fn from_gguf_file(path: &Path) -> Result<Tokenizer> {
        let meta = gguf::read_gguf_metadata(path)?;
        Tokenizer::from_gguf(&meta).map_err(|e| Error::new(format!("{}: {e}", path.display())))
    }

    /// Encodes text. Special tokens written in the text (`<|im_start|>`) become their ids.
    ///
    /// With `add_bos`, BOS is prepended only if the tokenizer wants one ([`Tokenizer::add_bos`])
    /// and the text does not already start with the BOS string, so a chat-templated prompt that
    /// already carries BOS never gets a second one.
    pub fn encode(&self, text: &str, add_bos: bool) -> Result<Vec<u32>> {
        // The post-processor is left out (`false`): BOS is our decision, made below.
        let enc = crate::guard::guarded(|| self.inner.encode_fast(text, false))
            .map_err(|e| Error::new(format!("{}: encode failed: {e}", self.origin)))?
            .map_err(|e| Error::new(format!("{}: encode failed: {e}", self.origin)))?;
        let mut ids = Vec::with_capacity(enc.len() + 1);
        if add_bos && self.add_bos {
            if let Some((s, id)) = &self.bos {
                if !text.starts_with(s.as_str()) {
                    ids.push(*id);
                }
            }
        }
        ids.extend_from_slice(enc.get_ids());
        Ok(ids)
    }

    /// Decodes ids to text, leaving out special tokens when `skip_special`. Unknown ids are
    /// skipped. No `clean_up_tokenization_spaces` is applied, so streamed and whole decodes agree.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        crate::guard::guarded(|| self.inner.decode(ids, skip_special))
            .map_err(|e| Error::new(format!("{}: decode failed: {e}", self.origin)))?
            .map_err(|e| Error::new(format!("{}: decode failed: {e}", self.origin)))
    }

    /// Writes the tokenizer as a Hugging Face folder holds it:
    /// `tokenizer.json` and a `tokenizer_config.json` with the BOS/EOS
    /// strings, `add_bos_token` and the chat template (for a tokenizer built
    /// from GGUF metadata, so the converted folder loads anywhere).
    pub fn save_hf(&self, dir: &Path) -> Result<()> {
        let tok_path = dir.join("tokenizer.json");
        let json = self.inner.to_string(true).map_err(|e| Error::new(format!("{}: {e}", tok_path.display())))?;
        std::fs::write(&tok_path, json).map_err(|e| Error::new(format!("{}: {e}", tok_path.display())))?;
        let mut cfg = serde_json::Map::new();
        cfg.insert("tokenizer_class".into(), "PreTrainedTokenizerFast".into());
        cfg.insert("add_bos_token".into(), Value::Bool(self.add_bos()));
        cfg.insert("add_eos_token".into(), Value::Bool(false));
        if let Some(b) = self.bos_token_str() {
            cfg.insert("bos_token".into(), b.into());
        }
        if let Some(e) = self.eos_token() {
            cfg.insert("eos_token".into(), e.into());
        }
        if let Some(t) = &self.chat_template {
            cfg.insert("chat_template".into(), t.as_str().into());
        }
        let cfg_path = dir.join("tokenizer_config.json");
        let text = serde_json::to_string_pretty(&Value::Object(cfg)).expect("JSON values serialize");
        std::fs::write(&cfg_path, text).map_err(|e| Error::new(format!("{}: {e}", cfg_path.display())))
    }

    /// The tokenizer as `tokenizer.json` holds it (for tools that read the
    /// vocabulary's byte forms, e.g. constrained decoding).
    pub fn to_hf_json(&self) -> Result<Value> {
        let text = self.inner.to_string(false).map_err(|e| Error::new(format!("tokenizer.json: {e}")))?;
        serde_json::from_str(&text).map_err(|e| Error::new(format!("tokenizer.json: {e}")))
    }

    /// The BOS token and its id, if the tokenizer has one.
    pub fn bos_token(&self) -> Option<(String, u32)> {
        self.bos.clone()
    }

    fn bos_token_str(&self) -> Option<&str> {
        self.bos.as_ref().map(|(s, _)| s.as_str())
    }

    /// The EOS token string the config names (the template variable `eos_token`).
    pub fn eos_token(&self) -> Option<&str> {
        self.eos_token.as_deref()
    }

    /// Every id that ends generation: the config's EOS, generation_config's EOS list, and the
    /// end-of-turn / end-of-text special tokens the vocabulary has (`<|im_end|>`, `<|eot_id|>`,
    /// `<end_of_turn>`, ...). The config's EOS comes first.
    pub fn eos_ids(&self) -> Vec<u32> {
        self.eos_ids.clone()
    }

    /// Whether the tokenizer wants BOS at the start of a sequence (tokenizer_config's
    /// `add_bos_token`, GGUF `add_bos_token`, or a post-processor that inserts it) and has one.
    pub fn add_bos(&self) -> bool {
        self.add_bos && self.bos.is_some()
    }

    /// Whether the tokenizer itself says whether to add BOS (tokenizer_config's
    /// `add_bos_token`, a post-processor that inserts BOS, GGUF
    /// `add_bos_token`); false when [`Tokenizer::add_bos`] is only a default.
    pub fn add_bos_declared(&self) -> bool {
        self.add_bos_declared
    }

    /// Sets whether [`Tokenizer::encode`] adds BOS: for the runtime to apply
    /// the model's own convention when the tokenizer is silent
    /// ([`Tokenizer::add_bos_declared`] is false). The BOS rule is unchanged
    /// (never a second BOS), and nothing is added without a BOS token.
    pub fn set_add_bos(&mut self, on: bool) {
        self.add_bos = on;
    }

    /// What loading ignored, one line each (for the caller to show).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Where the default chat template came from (a file, or a metadata key).
    pub fn chat_template_origin(&self) -> &str {
        &self.template_origin
    }

    /// The default chat template source, if the checkpoint has one.
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }

    /// A named chat template (tokenizer_config may list several, e.g. `tool_use`).
    pub fn chat_template_named(&self, name: &str) -> Option<&str> {
        self.named_templates.iter().find(|(n, _)| n == name).map(|(_, t)| t.as_str())
    }

    /// The default chat template compiled with this tokenizer's BOS/EOS strings.
    pub fn compiled_chat_template(&self) -> Result<Option<ChatTemplate>> {
        match &self.chat_template {
            None => Ok(None),
            Some(src) => {
                ChatTemplate::with_origin(src, self.bos_token_str(), self.eos_token.as_deref(), &self.template_origin)
                    .map(Some)
            }
        }
    }

    /// The longest token's text in bytes (vocabulary and added tokens):
    /// with a margin for normalizers, a bound on the bytes one token
    /// stands for, so a text can be found too long without tokenizing it.
    pub fn longest_token_bytes(&self) -> usize {
        self.inner.get_vocab(true).keys().map(String::len).max().unwrap_or(1).max(1) * 4
    }

    /// Vocabulary size including added tokens.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The id of a token string (vocabulary or added token).
    pub fn token_to_id(&self, t: &str) -> Option<u32> {
        self.inner.token_to_id(t)
    }

    /// The token string of an id.
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// Whether `id` is a special token (control token), e.g. to hide it from output.
    pub fn is_special(&self, id: u32) -> bool {
        self.special_ids.binary_search(&id).is_ok()
    }

    /// A streaming detokenizer that skips special tokens, i.e. agrees with
    /// `decode(ids, true)`.
    pub fn detokenizer(&self) -> StreamingDetokenizer {
        StreamingDetokenizer::new(self.inner.clone(), true)
    }

    /// A streaming detokenizer that agrees with `decode(ids, skip_special)`.
    pub fn detokenizer_with(&self, skip_special: bool) -> StreamingDetokenizer {
        StreamingDetokenizer::new(self.inner.clone(), skip_special)
    }
}
