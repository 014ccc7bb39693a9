//! GGUF files of `phimoe` (llama.cpp's architecture of the same name): the
//! metadata as the family's config and its tensor names as Hugging Face's,
//! on [`plugin_api::gguf`]. NeoX rope, so q/k rows are stored as Hugging
//! Face's. LongRoPE's per-pair factors are tensors (`rope_factors_long`,
//! `rope_factors_short`) and its magnitude scale is llama.cpp's
//! (`rope.scaling.attn_factor`, from the context stretch): the family reads
//! the long factors from the weights (mlx-lm ropes with them at every
//! length, so the short ones are dropped). The metadata has no router
//! jitter: the family's default (Phi-3.5-MoE's 0.01) stands.

use mlx::{Array, Result};
use plugin_api::gguf::{get, key_error, read_config, require, Key, DECODER_KEYS};
use plugin_api::FamilyConfig;
use serde_json::{json, Value};

/// The metadata key prefix.
const ARCH: &str = "phimoe";
/// The experts and LongRoPE's original context.
const KEYS: &[Key] = &[
    ("num_local_experts", "expert_count"),
    ("num_experts_per_tok", "expert_used_count"),
    ("original_max_position_embeddings", "rope.scaling.original_context_length"),
];
/// The tensor holding LongRoPE's long factors (one per rotated pair).
pub const LONG_FACTORS: &str = "rope_factors_long.weight";
/// Phi-3.5-MoE's names of the router and the stacked experts.
const NAMES: &[(&str, &str)] = &[
    ("ffn_gate_inp", "block_sparse_moe.gate"),
    ("ffn_gate_exps", "block_sparse_moe.switch_mlp.gate_proj"),
    ("ffn_up_exps", "block_sparse_moe.switch_mlp.up_proj"),
    ("ffn_down_exps", "block_sparse_moe.switch_mlp.down_proj"),
];

/// phimoe's config. With LongRoPE (the file has `rope.scaling.attn_factor`)
/// the factors are placeholders the family replaces from [`LONG_FACTORS`].
pub fn config<C: FamilyConfig>(raw: &Value) -> Result<C> {
    read_config(raw, ARCH, &[DECODER_KEYS, KEYS], |c| {
        require(raw, ARCH, "expert_count")?;
        require(raw, ARCH, "expert_used_count")?;
        if let Some(s) = c.remove("rope_scaling") {
            let kind = s.get("type").and_then(Value::as_str).unwrap_or("?");
            let what = format!("is `{kind}`, which the phimoe family does not implement");
            return Err(key_error(ARCH, "rope.scaling.type", &what));
        }
        let hidden = c.get("hidden_size").and_then(Value::as_i64).unwrap_or(0);
        let heads = c.get("num_attention_heads").and_then(Value::as_i64).unwrap_or(0);
        let head_dim = if heads > 0 { hidden / heads } else { 0 };
        if let Some(n) = get(raw, ARCH, "rope.dimension_count").and_then(Value::as_i64) {
            if n != head_dim {
                let what = format!("is {n}, not the head size {head_dim} (partial rotary)");
                return Err(key_error(ARCH, "rope.dimension_count", &what));
            }
        }
        if let Some(mscale) = get(raw, ARCH, "rope.scaling.attn_factor") {
            let ones = vec![1.0; (head_dim / 2).max(0) as usize];
            c.insert("rope_scaling".into(), json!({"type": "longrope", "long_factor": ones, "long_mscale": mscale}));
            c.insert("long_factor_from_weights".into(), json!(true));
        }
        Ok(())
    })
}

/// A checkpoint tensor in Hugging Face's (and mlx-lm's) terms: GGUF names
/// mapped, the short LongRoPE factors dropped; any other as it is.
pub fn rewrite(name: &str, t: Array) -> Result<Vec<(String, Array)>> {
    if name == "rope_factors_short.weight" {
        return Ok(vec![]);
    }
    Ok(vec![(plugin_api::gguf::hf_name(name, NAMES), t)])
}
