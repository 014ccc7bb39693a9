//! GGUF files of `qwen2`, `qwen2moe` and `qwen3moe` (llama.cpp's
//! architectures for qwen2, qwen2_moe and qwen3_moe): their metadata as the families' configs, on
//! [`plugin_api::gguf`]. Both use NeoX rope, so q/k rows are stored as
//! Hugging Face's, and llama.cpp's standard tensor names serve (the
//! stacked experts, `ffn_*_exps`, arrive as mlx-lm's `switch_mlp`).

use mlx::Result;
use plugin_api::gguf::{read_config, DECODER_KEYS, MOE_KEYS};
use plugin_api::FamilyConfig;
use serde_json::{json, Value};

/// qwen2's config (GGUF architecture `qwen2`).
pub fn qwen2_config<C: FamilyConfig>(raw: &Value) -> Result<C> {
    read_config(raw, "qwen2", &[DECODER_KEYS], |_| Ok(()))
}

/// qwen3_moe's config (GGUF architecture `qwen3moe`): llama.cpp routes
/// every layer and renormalises the top-k weights.
pub fn qwen3_moe_config<C: FamilyConfig>(raw: &Value) -> Result<C> {
    read_config(raw, "qwen3moe", &[DECODER_KEYS, MOE_KEYS], |c| {
        c.insert("norm_topk_prob".into(), json!(true));
        Ok(())
    })
}

/// qwen2_moe's config (GGUF architecture `qwen2moe`): llama.cpp routes
/// every layer (the shared expert gated by a sigmoid) and keeps the top-k
/// softmax weights as they are.
pub fn qwen2_moe_config<C: FamilyConfig>(raw: &Value) -> Result<C> {
    read_config(raw, "qwen2moe", &[DECODER_KEYS, MOE_KEYS], |c| {
        c.insert("norm_topk_prob".into(), json!(false));
        Ok(())
    })
}
