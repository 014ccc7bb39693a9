//! GGUF files of `gemma3` (llama.cpp's architecture for Gemma 3's text
//! model; a multimodal checkpoint's vision tower goes to a separate file):
//! the metadata as gemma3_text's config and the tensors under the gemma3
//! family's `language_model.` names, on [`plugin_api::gguf`].
//!
//! llama.cpp's conventions, undone or followed here:
//! - its converter stores every norm weight with Gemma's `+1` folded in;
//!   the family adds it again, so it is taken off (`(1 + w) - 1` is exact
//!   in float32 for the weights Gemma has, and adding 1 back gives the
//!   stored value to the bit);
//! - layers slide by `gemma3.attention.sliding_window_pattern` (a flag per
//!   layer, or every n-th global), 5 local to 1 global when absent; the
//!   local rope base is `gemma3.rope.freq_base_swa` (10000 when absent);
//! - scores are scaled by `gemma3.attention.scale` when the file has it,
//!   else as llama.cpp scales Gemma 3: by the head size, or for the 62-layer
//!   27B by `hidden / heads`;
//! - NeoX rope, so q/k rows are stored as Hugging Face's.

use mlx::{Array, Result};
use plugin_api::gguf::{get, hf_name, key_error, read_config, sliding_layers, Key, DECODER_KEYS};
use plugin_api::FamilyConfig;
use serde_json::{json, Map, Value};

/// The metadata key prefix.
const ARCH: &str = "gemma3";
/// Gemma 3's own keys.
const KEYS: &[Key] = &[("rope_local_base_freq", "rope.freq_base_swa"), ("sliding_window", "attention.sliding_window")];
/// Gemma's block names: llama.cpp's `ffn_norm` is the norm before the MLP.
const NAMES: &[(&str, &str)] = &[("ffn_norm", "pre_feedforward_layernorm")];

/// gemma3_text's config (`C`) from a GGUF file's metadata.
pub fn config<C: FamilyConfig>(raw: &Value) -> Result<C> {
    read_config(raw, ARCH, &[DECODER_KEYS, KEYS], |c| fill(raw, c))
}

/// What llama.cpp reads or fixes besides the standard keys.
fn fill(raw: &Value, c: &mut Map<String, Value>) -> Result<()> {
    let int = |k: &str| c.get(k).and_then(Value::as_i64);
    let (layers, hidden, heads) = (int("num_hidden_layers"), int("hidden_size"), int("num_attention_heads"));
    let head_dim = int("head_dim");
    // Without a layer count the parse names the missing key.
    let Some(layers) = layers else { return Ok(()) };
    // No window: every layer global, as llama.cpp runs such a file.
    let every = match get(raw, ARCH, "attention.sliding_window") {
        None => 1,
        Some(_) => every_nth(&sliding_layers(raw, ARCH, layers.max(0) as usize, 6)?)?,
    };
    c.insert("sliding_window_pattern".into(), json!(every));
    let scalar = match get(raw, ARCH, "attention.scale").and_then(Value::as_f64) {
        Some(s) if s > 0.0 => 1.0 / (s * s),
        Some(s) => return Err(key_error(ARCH, "attention.scale", &format!("is {s}, must be positive"))),
        None if layers == 62 => (hidden.unwrap_or(0) / heads.unwrap_or(1).max(1)) as f64,
        None => head_dim.unwrap_or(256) as f64,
    };
    c.insert("query_pre_attn_scalar".into(), json!(scalar));
    Ok(())
}

/// The `n` of "every n-th layer is global" that `sliding` follows
/// (gemma3_text's `sliding_window_pattern`), or an error naming the key.
fn every_nth(sliding: &[bool]) -> Result<i64> {
    let n = sliding.iter().position(|s| !s).map_or(sliding.len() + 1, |i| i + 1);
    if sliding.iter().enumerate().all(|(i, &s)| s == ((i + 1) % n != 0)) {
        return Ok(n as i64);
    }
    Err(key_error(ARCH, "attention.sliding_window_pattern", "is not every n-th layer global, which gemma3 reads"))
}

/// A checkpoint tensor for the gemma3 family: a GGUF name as the gemma3
/// family's (under `language_model.`), its norms without the folded `+1`;
/// any other as it is.
pub fn tensor(name: &str, t: Array) -> Result<(String, Array)> {
    if plugin_api::gguf::tensor_name(name, NAMES).is_none() {
        return Ok((name.to_string(), t));
    }
    let t = if name.ends_with("norm.weight") { t.sub_s(1.0)? } else { t };
    Ok((format!("language_model.{}", hf_name(name, NAMES)), t))
}
