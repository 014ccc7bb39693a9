//! GGUF metadata: reading it (through `famlx-formats`, which checks the file) and the
//! translation of llama.cpp's tokenizer keys into a Hugging Face `tokenizers` pipeline.

use std::collections::HashMap;
use std::path::Path;

pub use famlx_formats::gguf::MetaValue;

use serde_json::{json, Value};

use crate::error::{Error, Result};
use crate::special::{is_end_token_name, push_unique};

/// Reads the metadata of a GGUF file (v2 or v3, little-endian), after
/// checking the whole file's structure against its size.
pub fn read_gguf_metadata(path: &Path) -> Result<HashMap<String, MetaValue>> {
    let g = famlx_formats::gguf::Gguf::open(path).map_err(|e| Error::new(e.0))?;
    Ok(g.metadata)
}

/// Typed access to GGUF metadata; errors name the key.
pub(crate) struct Meta<'a>(pub &'a HashMap<String, MetaValue>);

impl Meta<'_> {
    pub fn str(&self, key: &str) -> Result<Option<&str>> {
        match self.0.get(key) {
            None => Ok(None),
            Some(MetaValue::Str(s)) => Ok(Some(s)),
            Some(other) => Err(wrong_type(key, "a string", other)),
        }
    }
    pub fn strs(&self, key: &str) -> Result<Option<&[String]>> {
        match self.0.get(key) {
            None => Ok(None),
            Some(MetaValue::Strs(s)) => Ok(Some(s)),
            Some(other) => Err(wrong_type(key, "an array of strings", other)),
        }
    }
    pub fn ints(&self, key: &str) -> Result<Option<&[i64]>> {
        match self.0.get(key) {
            None => Ok(None),
            Some(MetaValue::Ints(v)) => Ok(Some(v)),
            Some(MetaValue::Strs(v)) if v.is_empty() => Ok(Some(&[])),
            Some(other) => Err(wrong_type(key, "integers", other)),
        }
    }
    pub fn floats(&self, key: &str) -> Result<Option<Vec<f64>>> {
        match self.0.get(key) {
            None => Ok(None),
            Some(MetaValue::Floats(v)) => Ok(Some(v.clone())),
            Some(MetaValue::Ints(v)) => Ok(Some(v.iter().map(|&i| i as f64).collect())),
            Some(other) => Err(wrong_type(key, "floats", other)),
        }
    }
    pub fn bool(&self, key: &str) -> Result<Option<bool>> {
        match self.0.get(key) {
            None => Ok(None),
            Some(MetaValue::Bool(b)) => Ok(Some(*b)),
            Some(MetaValue::Ints(v)) if v.len() == 1 => Ok(Some(v[0] != 0)),
            Some(other) => Err(wrong_type(key, "a bool", other)),
        }
    }
    /// A token id; `n_vocab` bounds it.
    pub fn id(&self, key: &str, n_vocab: usize) -> Result<Option<u32>> {
        let v = match self.0.get(key) {
            None => return Ok(None),
            Some(MetaValue::Ints(v)) if v.len() == 1 => v[0],
            Some(other) => return Err(wrong_type(key, "one integer", other)),
        };
        // llama.cpp writes -1 (or u32::MAX) for "no such token".
        if v < 0 || v == u32::MAX as i64 {
            return Ok(None);
        }
        if v as usize >= n_vocab {
            return Err(Error::new(format!(
                "GGUF metadata {key}: token id {v} is out of range (vocabulary has {n_vocab} tokens)"
            )));
        }
        Ok(Some(v as u32))
    }
}

fn wrong_type(key: &str, want: &str, got: &MetaValue) -> Error {
    let got = match got {
        MetaValue::Str(_) => "a string",
        MetaValue::Strs(_) => "an array of strings",
        MetaValue::Ints(_) => "integers",
        MetaValue::Floats(_) => "floats",
        MetaValue::Bool(_) => "a bool",
    };
    Error::new(format!("GGUF metadata {key}: expected {want}, found {got}"))
}

/// llama.cpp token types.
pub(crate) const TOKEN_NORMAL: i64 = 1;
pub(crate) const TOKEN_CONTROL: i64 = 3;
pub(crate) const TOKEN_USER_DEFINED: i64 = 4;

/// Llama 3's split regex (numbers in groups of up to three).
const LLAMA3_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2's split regex (numbers one digit at a time).
const QWEN2_PATTERN: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Byte-level BPE; with `use_regex` it first splits with GPT-2's regex.
fn byte_level(use_regex: bool) -> Value {
    json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": use_regex})
}

fn split_then_bytes(pattern: &str) -> Value {
    json!({"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": false},
        byte_level(false),
    ]})
}

/// The pre-tokenizer for llama.cpp's `tokenizer.ggml.pre` name, and whether BPE should take a
/// whole pre-token that is in the vocabulary without merging (llama.cpp's `ignore_merges`).
fn bpe_pre_tokenizer(pre: &str) -> Result<(Value, bool)> {
    Ok(match pre {
        // GPT-2 regex with every digit split off first.
        "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone" | "minerva-7b" => (
            json!({"type": "Sequence", "pretokenizers": [
                {"type": "Digits", "individual_digits": true},
                byte_level(true),
            ]}),
            false,
        ),
        "gpt2" | "gpt-2" | "default" | "" | "phi-2" | "olmo" | "jais" | "roberta-bpe" | "poro-chat" | "viking"
        | "bloom" | "gpt3-finnish" => (byte_level(true), false),
        "llama-bpe" | "llama3" | "llama-v3" | "falcon3" | "pixtral" => (split_then_bytes(LLAMA3_PATTERN), true),
        "qwen2" | "deepseek-r1-qwen" | "megrez" | "stablelm2" | "hunyuan" => (split_then_bytes(QWEN2_PATTERN), false),
        other => {
            return Err(Error::new(format!(
                "GGUF metadata tokenizer.ggml.pre: unsupported pre-tokenizer {other:?} \
                 (supported: smollm, gpt2/default, llama-bpe, qwen2 and their aliases)"
            )))
        }
    })
}

/// What `Tokenizer::from_gguf` needs besides the `tokenizers` pipeline.
pub(crate) struct GgufTokenizer {
    pub inner: tokenizers::Tokenizer,
    pub bos: Option<(String, u32)>,
    pub eos_ids: Vec<u32>,
    pub add_bos: bool,
    /// Whether the metadata has `tokenizer.ggml.add_bos_token` (else `add_bos` is a default).
    pub add_bos_declared: bool,
    pub chat_template: Option<String>,
}

/// Builds the tokenizer that llama.cpp's tokenizer keys describe.
pub(crate) fn build(meta: &HashMap<String, MetaValue>) -> Result<GgufTokenizer> {
    let m = Meta(meta);
    let model = m
        .str("tokenizer.ggml.model")?
        .ok_or_else(|| Error::new("GGUF metadata tokenizer.ggml.model: missing (the file carries no tokenizer)"))?;
    let tokens =
        m.strs("tokenizer.ggml.tokens")?.ok_or_else(|| Error::new("GGUF metadata tokenizer.ggml.tokens: missing"))?;
    let n = tokens.len();
    if n == 0 {
        return Err(Error::new("GGUF metadata tokenizer.ggml.tokens: empty vocabulary"));
    }
    let types: Vec<i64> = match m.ints("tokenizer.ggml.token_type")? {
        Some(t) if t.len() == n => t.to_vec(),
        Some(t) => {
            return Err(Error::new(format!(
                "GGUF metadata tokenizer.ggml.token_type: {} entries for {n} tokens",
                t.len()
            )))
        }
        None => vec![TOKEN_NORMAL; n],
    };
    let bos_id = m.id("tokenizer.ggml.bos_token_id", n)?;
    let eos_id = m.id("tokenizer.ggml.eos_token_id", n)?;
    let unk_id = m.id("tokenizer.ggml.unknown_token_id", n)?;
    let pre = m.str("tokenizer.ggml.pre")?.unwrap_or("default");

    let (json_tok, default_add_bos) = match model {
        "gpt2" => {
            let merges = m
                .strs("tokenizer.ggml.merges")?
                .ok_or_else(|| Error::new("GGUF metadata tokenizer.ggml.merges: missing (needed by a gpt2/BPE tokenizer)"))?;
            let (pre_tok, ignore_merges) = bpe_pre_tokenizer(pre)?;
            let mut pairs = Vec::with_capacity(merges.len());
            for (i, mg) in merges.iter().enumerate() {
                let (a, b) = mg.split_once(' ').ok_or_else(|| {
                    Error::new(format!("GGUF metadata tokenizer.ggml.merges[{i}]: {mg:?} is not two tokens separated by a space"))
                })?;
                pairs.push(json!([a, b]));
            }
            let model = json!({
                "type": "BPE", "dropout": null, "unk_token": null,
                "continuing_subword_prefix": null, "end_of_word_suffix": null,
                "fuse_unk": false, "byte_fallback": false, "ignore_merges": ignore_merges,
                "vocab": vocab_json(tokens), "merges": pairs,
            });
            let decoder = json!({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true});
            // llama.cpp adds BOS by default only for Llama 3 style BPE vocabularies.
            let default_bos = matches!(pre, "llama-bpe" | "llama3" | "llama-v3" | "falcon3");
            (assemble(model, Value::Null, pre_tok, decoder, added_tokens(tokens, &types, &[bos_id, eos_id])), default_bos)
        }
        "llama" => {
            let scores = m
                .floats("tokenizer.ggml.scores")?
                .ok_or_else(|| Error::new("GGUF metadata tokenizer.ggml.scores: missing (needed by a llama/SentencePiece tokenizer)"))?;
            if scores.len() != n {
                return Err(Error::new(format!(
                    "GGUF metadata tokenizer.ggml.scores: {} entries for {n} tokens",
                    scores.len()
                )));
            }
            let add_space = m.bool("tokenizer.ggml.add_space_prefix")?.unwrap_or(true);
            let unk = unk_id.map(|i| tokens[i as usize].clone());
            let model = json!({
                "type": "BPE", "dropout": null, "unk_token": unk,
                "continuing_subword_prefix": null, "end_of_word_suffix": null,
                "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
                "vocab": vocab_json(tokens), "merges": spm_merges(tokens, &types, &scores),
            });
            let mut norms = Vec::new();
            if add_space {
                norms.push(json!({"type": "Prepend", "prepend": "\u{2581}"}));
            }
            norms.push(json!({"type": "Replace", "pattern": {"String": " "}, "content": "\u{2581}"}));
            let mut decs = vec![
                json!({"type": "Replace", "pattern": {"String": "\u{2581}"}, "content": " "}),
                json!({"type": "ByteFallback"}),
                json!({"type": "Fuse"}),
            ];
            if add_space {
                decs.push(json!({"type": "Strip", "content": " ", "start": 1, "stop": 0}));
            }
            let normalizer = json!({"type": "Sequence", "normalizers": norms});
            let decoder = json!({"type": "Sequence", "decoders": decs});
            (assemble(model, normalizer, Value::Null, decoder, added_tokens(tokens, &types, &[bos_id, eos_id, unk_id])), true)
        }
        other => {
            return Err(Error::new(format!(
                "GGUF metadata tokenizer.ggml.model: unsupported tokenizer model {other:?} (supported: gpt2 (BPE), llama (SentencePiece))"
            )))
        }
    };
    let bytes = serde_json::to_vec(&json_tok).expect("JSON values serialize");
    let inner = crate::guard::guarded(|| tokenizers::Tokenizer::from_bytes(&bytes))
        .map_err(|e| Error::new(format!("GGUF metadata tokenizer.ggml.*: {e}")))?
        .map_err(|e| Error::new(format!("GGUF metadata tokenizer.ggml.*: cannot build the tokenizer: {e}")))?;

    let declared = m.bool("tokenizer.ggml.add_bos_token")?;
    let add_bos = declared.unwrap_or(default_add_bos);
    let mut eos_ids = Vec::new();
    for key in ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"] {
        if let Some(id) = m.id(key, n)? {
            push_unique(&mut eos_ids, id);
        }
    }
    for (id, t) in tokens.iter().enumerate() {
        if types[id] == TOKEN_CONTROL && is_end_token_name(t) {
            push_unique(&mut eos_ids, id as u32);
        }
    }
    Ok(GgufTokenizer {
        inner,
        bos: bos_id.map(|i| (tokens[i as usize].clone(), i)),
        eos_ids,
        add_bos,
        add_bos_declared: declared.is_some(),
        chat_template: m.str("tokenizer.chat_template")?.map(str::to_string),
    })
}

fn vocab_json(tokens: &[String]) -> Value {
    let mut map = serde_json::Map::with_capacity(tokens.len());
    for (i, t) in tokens.iter().enumerate() {
        // On a duplicate string the first id wins, as in llama.cpp's token-to-id map.
        map.entry(t.clone()).or_insert(json!(i));
    }
    Value::Object(map)
}

/// Control tokens (and BOS/EOS/UNK whatever their type) become special added tokens, so that
/// `<|im_start|>` in text encodes as one id; user-defined tokens are matched in text too but
/// are not special.
fn added_tokens(tokens: &[String], types: &[i64], always: &[Option<u32>]) -> Vec<Value> {
    let mut out = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        let forced = always.contains(&Some(i as u32));
        let special = match types[i] {
            TOKEN_CONTROL => true,
            TOKEN_USER_DEFINED => false,
            _ if forced => true,
            _ => continue,
        };
        if t.is_empty() {
            continue;
        }
        out.push(json!({
            "id": i, "content": t, "single_word": false, "lstrip": false, "rstrip": false,
            "normalized": false, "special": special || forced,
        }));
    }
    out
}

fn assemble(model: Value, normalizer: Value, pre_tokenizer: Value, decoder: Value, added: Vec<Value>) -> Value {
    json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": added, "normalizer": normalizer, "pre_tokenizer": pre_tokenizer,
        "post_processor": null, "decoder": decoder, "model": model,
    })
}

/// SentencePiece BPE as BPE merges: every split of a vocabulary piece into two pieces that are
/// both in the vocabulary is a merge, ranked by the merged piece's score (higher first). This
/// reproduces SentencePiece's greedy highest-score-pair merging.
fn spm_merges(tokens: &[String], types: &[i64], scores: &[f64]) -> Vec<Value> {
    let ids: HashMap<&str, usize> = tokens.iter().enumerate().rev().map(|(i, t)| (t.as_str(), i)).collect();
    let mut merges: Vec<(f64, usize, usize, usize)> = Vec::new();
    for (id, t) in tokens.iter().enumerate() {
        if types[id] != TOKEN_NORMAL && types[id] != TOKEN_USER_DEFINED {
            continue;
        }
        for (cut, _) in t.char_indices().skip(1) {
            let (l, r) = t.split_at(cut);
            if let (Some(&li), Some(&ri)) = (ids.get(l), ids.get(r)) {
                merges.push((scores[id], id, li, ri));
            }
        }
    }
    merges.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)).then(a.3.cmp(&b.3)));
    merges.into_iter().map(|(_, _, l, r)| json!([tokens[l], tokens[r]])).collect()
}
