//! GGUF files of llama.cpp's `ernie4_5` and `ernie4_5-moe` architectures:
//! their metadata as the families' configs, on [`plugin_api::gguf`].
//! ERNIE ropes interleaved pairs and llama.cpp stores q/k rows as Hugging
//! Face's (no permutation); the stacked experts arrive as mlx-lm's
//! `switch_mlp`, the shared experts under ERNIE's `shared_experts`.

use mlx::Result;
use plugin_api::gguf::{read_config, Key, DECODER_KEYS};
use plugin_api::FamilyConfig;
use serde_json::{json, Map, Value};

/// llama.cpp's names of the shared experts → ERNIE's.
pub const NAMES: &[(&str, &str)] = &[
    ("ffn_gate_shexp", "mlp.shared_experts.gate_proj"),
    ("ffn_up_shexp", "mlp.shared_experts.up_proj"),
    ("ffn_down_shexp", "mlp.shared_experts.down_proj"),
];

/// ERNIE 4.5 MoE's fields and llama.cpp's keys for them (the shared
/// experts' width is `moe_intermediate_size` times their count, as mlx-lm
/// reads it, not llama.cpp's `expert_shared_feed_forward_length`).
const MOE_KEYS: &[Key] = &[
    ("moe_num_experts", "expert_count"),
    ("moe_k", "expert_used_count"),
    ("moe_intermediate_size", "expert_feed_forward_length"),
    ("moe_num_shared_experts", "expert_shared_count"),
    ("moe_layer_start_index", "leading_dense_block_count"),
    ("moe_layer_interval", "interleave_moe_layer_step"),
];

/// What the metadata does not store: the released checkpoints have no
/// biases (llama.cpp's ERNIE reads none it requires) and no rope scaling.
fn fill(c: &mut Map<String, Value>) -> Result<()> {
    c.insert("use_bias".into(), json!(false));
    Ok(())
}

/// ernie4_5's config (GGUF architecture `ernie4_5`).
pub fn ernie4_5_config<C: FamilyConfig>(raw: &Value) -> Result<C> {
    read_config(raw, "ernie4_5", &[DECODER_KEYS], fill)
}

/// ernie4_5_moe's config (GGUF architecture `ernie4_5-moe`): softmax
/// routing, as llama.cpp's.
pub fn ernie4_5_moe_config<C: FamilyConfig>(raw: &Value) -> Result<C> {
    read_config(raw, "ernie4_5-moe", &[DECODER_KEYS, MOE_KEYS], fill)
}
