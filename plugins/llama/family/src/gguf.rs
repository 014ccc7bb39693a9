//! GGUF checkpoints of the llama architecture: llama.cpp's metadata keys
//! and tensor names in Hugging Face's terms (the shared rules of
//! [`plugin_api::gguf`]), and the q/k row order its rope layout needs
//! undone.

use mlx::{Array, Error, Result};
use plugin_api::config::field;
use plugin_api::gguf::{self as g, Key, DECODER_KEYS};
use serde_json::{json, Value};

/// The metadata key prefix (`general.architecture`).
const ARCH: &str = "llama";
/// The metadata keys llama reads.
const KEYS: &[&[Key]] = &[DECODER_KEYS];

/// The config.json a GGUF file's metadata describes (the vocabulary from
/// the tokenizer when the metadata has no size). The head is decided at
/// build time, from whether `output.weight` exists.
pub fn config(meta: &Value) -> Result<Value> {
    let mut c = g::config(meta, ARCH, KEYS)?;
    if !c.contains_key("vocab_size") {
        c.insert("vocab_size".into(), json!(field::<i64>(meta, "tokenizer.ggml.tokens.count")?));
    }
    c.insert("gguf".into(), json!(true));
    Ok(Value::Object(c))
}

/// An error about a config field, in the GGUF metadata's own key names.
pub fn rename_fields(e: Error) -> Error {
    g::rename_fields(e, ARCH, KEYS)
}

/// GGUF tensor names → Hugging Face names (`None`: not a model weight).
pub fn tensor_name(name: &str) -> Option<String> {
    g::tensor_name(name, &[])
}

/// Undoes llama.cpp's q/k row permutation (rows grouped per head as
/// [head, head_dim/2, 2] back to [head, 2, head_dim/2]). Only the llama
/// architecture's converter permutes; the NeoX-rope architectures (Qwen,
/// Gemma, OLMo, StarCoder 2) store q/k as Hugging Face does.
pub fn unpermute(t: &Array, heads: i32) -> Result<Array> {
    let shape = t.shape().to_vec();
    let rows = shape[0];
    let mut s = vec![heads, rows / heads / 2, 2];
    s.extend_from_slice(&shape[1..]);
    t.reshape(&s)?.swapaxes(1, 2)?.reshape(&shape)
}
