//! GGUF checkpoints of the llama and smollm3 architectures: llama.cpp's
//! metadata keys and tensor names in Hugging Face's terms (the shared
//! rules of [`plugin_api::gguf`]), and the q/k row order its rope layout
//! needs undone. SmolLM3's file stores no NoPE pattern: llama.cpp leaves
//! rope out of every 4th layer, the config's default here too.

use mlx::{Error, Result};
use plugin_api::config::field;
use plugin_api::gguf::{self as g, Key, DECODER_KEYS};
use serde_json::{json, Value};

/// The metadata key prefix (`general.architecture`) of Llama's files.
const ARCH: &str = "llama";
/// SmolLM3's.
const SMOLLM3: &str = "smollm3";
/// The metadata keys llama reads: a decoder's, and the experts of a
/// Mixtral file (which llama.cpp's converter writes as `llama`).
const KEYS: &[&[Key]] =
    &[DECODER_KEYS, &[("num_local_experts", "expert_count"), ("num_experts_per_tok", "expert_used_count")]];

/// The config.json a GGUF file's metadata describes (the vocabulary from
/// the tokenizer when the metadata has no size). The head is decided at
/// build time, from whether `output.weight` exists.
pub fn config(meta: &Value) -> Result<Value> {
    let arch = arch(meta);
    let mut c = g::config(meta, arch, KEYS)?;
    if arch == SMOLLM3 {
        c.insert("model_type".into(), json!(SMOLLM3));
    }
    if !c.contains_key("vocab_size") {
        c.insert("vocab_size".into(), json!(field::<i64>(meta, "tokenizer.ggml.tokens.count")?));
    }
    c.insert("gguf".into(), json!(true));
    Ok(Value::Object(c))
}

/// The metadata key prefix of a file this family reads.
pub fn arch(meta: &Value) -> &'static str {
    match meta.get("model_type").and_then(Value::as_str) {
        Some(SMOLLM3) => SMOLLM3,
        _ => ARCH,
    }
}

/// An error about a config field, in the GGUF metadata's own key names.
pub fn rename_fields(e: Error) -> Error {
    rename_fields_of(e, ARCH)
}

/// [`rename_fields`] for a file of architecture `arch`.
pub fn rename_fields_of(e: Error, arch: &str) -> Error {
    g::rename_fields(e, arch, KEYS)
}

/// GGUF tensor names → Hugging Face names (`None`: not a model weight).
pub fn tensor_name(name: &str) -> Option<String> {
    g::tensor_name(name, &[])
}

pub use plugin_api::gguf::unpermute;
