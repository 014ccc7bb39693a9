//! GGUF files of `granite` and `granitemoe` (llama.cpp's architectures for
//! Granite 3 and its MoE): the metadata as the families' configs, on
//! [`plugin_api::gguf`], and the tensors in Hugging Face's terms. Granite
//! converts as llama does, so q/k rows come permuted for llama.cpp's rope
//! layout and are put back here.

use mlx::{Array, Result};
use plugin_api::gguf::{hf_name, read_config, Key, DECODER_KEYS};
use plugin_api::FamilyConfig;
use serde_json::{json, Value};

/// Granite's four multipliers (llama.cpp calls them scales).
const MULTIPLIERS: &[Key] = &[
    ("attention_multiplier", "attention.scale"),
    ("embedding_multiplier", "embedding_scale"),
    ("residual_multiplier", "residual_scale"),
    ("logits_scaling", "logit_scale"),
];

/// The experts, in granitemoe's config.json names.
const EXPERTS: &[Key] = &[("num_local_experts", "expert_count"), ("num_experts_per_tok", "expert_used_count")];

/// granitemoe's names for the router and the stacked experts (under
/// `block_sparse_moe`, in mlx-lm's `switch_mlp` layout).
const MOE_NAMES: &[(&str, &str)] = &[
    ("ffn_gate_inp", "block_sparse_moe.router.layer"),
    ("ffn_gate_exps", "block_sparse_moe.switch_mlp.gate_proj"),
    ("ffn_up_exps", "block_sparse_moe.switch_mlp.up_proj"),
    ("ffn_down_exps", "block_sparse_moe.switch_mlp.down_proj"),
];

/// granite's config (GGUF architecture `granite`): llama.cpp keeps no
/// bias flags, and Granite 3 has none.
pub fn granite_config<C: FamilyConfig>(raw: &Value) -> Result<C> {
    read_config(raw, "granite", &[DECODER_KEYS, MULTIPLIERS], |c| {
        c.insert("attention_bias".into(), json!(false));
        c.insert("mlp_bias".into(), json!(false));
        Ok(())
    })
}

/// granitemoe's config (GGUF architecture `granitemoe`).
pub fn granitemoe_config<C: FamilyConfig>(raw: &Value) -> Result<C> {
    read_config(raw, "granitemoe", &[DECODER_KEYS, MULTIPLIERS, EXPERTS], |c| {
        c.insert("attention_bias".into(), json!(false));
        Ok(())
    })
}

/// A checkpoint tensor in Hugging Face's terms: a GGUF name mapped (the
/// MoE's names too when `moe`), and q/k rows of `heads` / `kv_heads`
/// heads unpermuted; any other tensor as it is.
pub fn hf_tensor(name: &str, t: Array, heads: i32, kv_heads: i32, moe: bool) -> Result<(String, Array)> {
    if !name.starts_with("blk.") {
        return Ok((hf_name(name, &[]), t));
    }
    let hf = hf_name(name, if moe { MOE_NAMES } else { &[] });
    let t = if hf.contains(".self_attn.q_proj.") {
        plugin_api::gguf::unpermute(&t, heads)?
    } else if hf.contains(".self_attn.k_proj.") {
        plugin_api::gguf::unpermute(&t, kv_heads)?
    } else {
        t
    };
    Ok((hf, t))
}
