//! GGUF files of `phi` (llama.cpp's architecture `phi2`): the metadata as
//! the family's config and its tensor names as Hugging Face's, on
//! [`plugin_api::gguf`]. NeoX rope, so q/k rows are stored as Hugging
//! Face's; llama.cpp's attention output and MLP are Phi's `dense` and
//! `fc1` / `fc2`, its output norm Phi's `final_layernorm`.

use mlx::Result;
use plugin_api::gguf::{get, key_error, read_config, require, Key, DECODER_KEYS};
use plugin_api::FamilyConfig;
use serde_json::{json, Value};

/// The metadata key prefix.
const ARCH: &str = "phi2";
/// Phi's LayerNorm epsilon.
const NORM_KEYS: &[Key] = &[("layer_norm_eps", "attention.layer_norm_epsilon")];
/// Phi's names of the blocks' parts llama.cpp names otherwise.
pub const NAMES: &[(&str, &str)] =
    &[("attn_output", "self_attn.dense"), ("ffn_up", "mlp.fc1"), ("ffn_down", "mlp.fc2")];

/// A GGUF tensor name in Hugging Face's terms (any other as it is).
pub fn hf_name(name: &str) -> String {
    match name.split_once('.') {
        Some(("output_norm", suffix)) => format!("model.final_layernorm.{suffix}"),
        _ => plugin_api::gguf::hf_name(name, NAMES),
    }
}

/// phi's config: the rotated share of each head from llama.cpp's rotary
/// width (`rope.dimension_count`, features per head), which it requires
/// along with the LayerNorm epsilon.
pub fn config<C: FamilyConfig>(raw: &Value) -> Result<C> {
    read_config(raw, ARCH, &[DECODER_KEYS, NORM_KEYS], |c| {
        require(raw, ARCH, "attention.layer_norm_epsilon")?;
        require(raw, ARCH, "rope.dimension_count")?;
        if let Some(s) = c.get("rope_scaling") {
            let kind = s.get("type").and_then(Value::as_str).unwrap_or("?");
            return Err(key_error(
                ARCH,
                "rope.scaling.type",
                &format!("is `{kind}`, which the phi family does not implement"),
            ));
        }
        let dims = get(raw, ARCH, "rope.dimension_count").and_then(Value::as_f64).unwrap_or(0.0);
        let hidden = c.get("hidden_size").and_then(Value::as_f64).unwrap_or(0.0);
        let heads = c.get("num_attention_heads").and_then(Value::as_f64).unwrap_or(0.0);
        if hidden > 0.0 && heads > 0.0 {
            let head_dim = (hidden / heads).floor();
            if !(dims > 0.0 && dims <= head_dim) {
                return Err(key_error(ARCH, "rope.dimension_count", &format!("is {dims}, must be in 1..={head_dim}")));
            }
            c.insert("partial_rotary_factor".into(), json!(dims / head_dim));
        }
        Ok(())
    })
}
