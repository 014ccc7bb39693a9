//! GGUF files of `stablelm` (llama.cpp's architecture of the same name):
//! the metadata as the family's config and its tensor names as Hugging
//! Face's, on [`plugin_api::gguf`]. NeoX rope, so q/k rows are stored as
//! Hugging Face's. llama.cpp stacks the per-head q/k LayerNorm scales into
//! one `[heads, head_dim]` tensor, split back here into mlx-lm's
//! `norms.{i}`; its metadata does not say whether the q/k/v biases and
//! those norms are there, so the family looks for them among the weights.

use mlx::{Array, Result};
use plugin_api::gguf::{partial_rotary, read_config, refuse_rope_scaling, require, Key, DECODER_KEYS};
use plugin_api::FamilyConfig;
use serde_json::{json, Value};

/// The metadata key prefix.
const ARCH: &str = "stablelm";
/// StableLM's LayerNorm epsilon and residual layout.
const KEYS: &[Key] =
    &[("layer_norm_eps", "attention.layer_norm_epsilon"), ("use_parallel_residual", "use_parallel_residual")];

/// StableLM's names of the per-head q/k norms.
const NAMES: &[(&str, &str)] = &[("attn_q_norm", "self_attn.q_layernorm"), ("attn_k_norm", "self_attn.k_layernorm")];

/// stablelm's config: the rotated share of each head from llama.cpp's
/// rotary width (`rope.dimension_count`, which it requires with the
/// LayerNorm epsilon), its default rope base where the file has none.
pub fn config<C: FamilyConfig>(raw: &Value) -> Result<C> {
    read_config(raw, ARCH, &[DECODER_KEYS, KEYS], |c| {
        require(raw, ARCH, "attention.layer_norm_epsilon")?;
        require(raw, ARCH, "rope.dimension_count")?;
        refuse_rope_scaling(c, ARCH, "stablelm")?;
        c.entry("rope_theta").or_insert(json!(10000.0));
        partial_rotary(raw, ARCH, c)?;
        c.insert("use_qkv_bias".into(), json!(false));
        c.insert("qk_layernorm".into(), json!(false));
        c.insert("optional_tensors_from_weights".into(), json!(true));
        Ok(())
    })
}

/// A checkpoint tensor in Hugging Face's (and mlx-lm's) terms: a GGUF
/// name mapped, a stacked q/k norm split per head; any other as it is.
pub fn rewrite(name: &str, t: Array) -> Result<Vec<(String, Array)>> {
    let hf = plugin_api::gguf::hf_name(name, NAMES);
    let per_head = name.ends_with(".attn_q_norm.weight") || name.ends_with(".attn_k_norm.weight");
    if !(per_head && t.ndim() == 2) {
        return Ok(vec![(hf, t)]);
    }
    let stem = hf.trim_end_matches(".weight");
    (0..t.dim(0))
        .map(|i| Ok((format!("{stem}.norms.{i}.weight"), t.slice_axis(0, i, i + 1)?.reshape(&[t.dim(1)])?)))
        .collect()
}
