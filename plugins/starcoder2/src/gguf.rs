//! GGUF files of `starcoder2` (llama.cpp's architecture of the same name):
//! the metadata as the family's config and its tensor names as Hugging
//! Face's, on [`plugin_api::gguf`]. NeoX rope, so q/k rows are stored as
//! Hugging Face's; the LayerNorms keep their biases under the same names.

use mlx::Result;
use plugin_api::gguf::{read_config, require, Key, DECODER_KEYS};
use plugin_api::FamilyConfig;
use serde_json::Value;

/// The metadata key prefix.
const ARCH: &str = "starcoder2";
/// StarCoder 2's LayerNorm epsilon.
const NORM_KEYS: &[Key] = &[("norm_epsilon", "attention.layer_norm_epsilon")];
/// The MLP's names: llama.cpp's up/down are StarCoder 2's `c_fc` / `c_proj`.
pub const NAMES: &[(&str, &str)] = &[("ffn_up", "mlp.c_fc"), ("ffn_down", "mlp.c_proj")];

/// starcoder2's config; llama.cpp requires the norm epsilon, which
/// config.json may leave to mlx-lm's default.
pub fn config<C: FamilyConfig>(raw: &Value) -> Result<C> {
    read_config(raw, ARCH, &[DECODER_KEYS, NORM_KEYS], |_| require(raw, ARCH, "attention.layer_norm_epsilon"))
}
