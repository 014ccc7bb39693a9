//! GGUF files of `gemma2` (llama.cpp's architecture for Gemma 2): the
//! metadata as gemma2's config and the tensors under Hugging Face's names,
//! on [`plugin_api::gguf`].
//!
//! llama.cpp's conventions, undone or followed here:
//! - its converter stores every norm weight with Gemma's `+1` folded in;
//!   the family adds it again, so it is taken off (exact in float32 for
//!   the weights Gemma has);
//! - scores are scaled by `gemma2.attention.scale` when the file has it,
//!   else as llama.cpp scales Gemma 2: by the head size, or for the
//!   46-layer 27B by `hidden / heads`;
//! - the soft caps are 50 (scores) and 30 (logits) when absent, as in
//!   llama.cpp; its sliding window is not read: as mlx-lm's gemma2, every
//!   layer attends to the whole context;
//! - NeoX rope, so q/k rows are stored as Hugging Face's.

use mlx::{Array, Result};
use plugin_api::gguf::{get, hf_name, key_error, read_config, tensor_name, Key, DECODER_KEYS};
use plugin_api::FamilyConfig;
use serde_json::{json, Map, Value};

/// The metadata key prefix.
const ARCH: &str = "gemma2";
/// Gemma 2's own keys.
const KEYS: &[Key] =
    &[("attn_logit_softcapping", "attn_logit_softcapping"), ("final_logit_softcapping", "final_logit_softcapping")];
/// Gemma's block names: llama.cpp's `ffn_norm` is the norm before the MLP.
const NAMES: &[(&str, &str)] = &[("ffn_norm", "pre_feedforward_layernorm")];

/// gemma2's config (`C`): config.json, or a GGUF file's metadata.
pub fn config<C: FamilyConfig>(raw: &Value) -> Result<C> {
    read_config(raw, ARCH, &[DECODER_KEYS, KEYS], |c| fill(raw, c))
}

/// The attention scale as gemma2's `query_pre_attn_scalar`.
fn fill(raw: &Value, c: &mut Map<String, Value>) -> Result<()> {
    let int = |k: &str| c.get(k).and_then(Value::as_i64);
    let (layers, hidden, heads) = (int("num_hidden_layers"), int("hidden_size"), int("num_attention_heads"));
    let scalar = match get(raw, ARCH, "attention.scale").and_then(Value::as_f64) {
        Some(s) if s > 0.0 => 1.0 / (s * s),
        Some(s) => return Err(key_error(ARCH, "attention.scale", &format!("is {s}, must be positive"))),
        None if layers == Some(46) => (hidden.unwrap_or(0) / heads.unwrap_or(1).max(1)) as f64,
        // Without a head size the parse names the missing key.
        None => match int("head_dim") {
            Some(d) => d as f64,
            None => return Ok(()),
        },
    };
    c.insert("query_pre_attn_scalar".into(), json!(scalar));
    Ok(())
}

/// A checkpoint tensor for gemma2: a GGUF name as Hugging Face's, its
/// norms without the folded `+1`; any other as it is.
pub fn tensor(name: &str, t: Array) -> Result<(String, Array)> {
    if tensor_name(name, NAMES).is_none() {
        return Ok((name.to_string(), t));
    }
    let t = if name.ends_with("norm.weight") { t.sub_s(1.0)? } else { t };
    Ok((hf_name(name, NAMES), t))
}
