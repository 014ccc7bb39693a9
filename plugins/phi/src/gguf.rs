//! GGUF files of `phi` (llama.cpp's architecture `phi2`): the metadata as
//! the family's config and its tensor names as Hugging Face's, on
//! [`plugin_api::gguf`]. NeoX rope, so q/k rows are stored as Hugging
//! Face's; llama.cpp's attention output and MLP are Phi's `dense` and
//! `fc1` / `fc2`, its output norm Phi's `final_layernorm`.

use mlx::Result;
use plugin_api::gguf::{partial_rotary, read_config, refuse_rope_scaling, require, Key, DECODER_KEYS};
use plugin_api::FamilyConfig;
use serde_json::Value;

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
        refuse_rope_scaling(c, ARCH, "phi")?;
        partial_rotary(raw, ARCH, c)?;
        Ok(())
    })
}
