//! GGUF files of `glm4` (llama.cpp's architecture for GLM-4-0414): the
//! metadata as the family's config, on [`plugin_api::gguf`], and the
//! tensor names GLM-4 gives its sandwich norms and fused gate/up.
//! llama.cpp ropes GLM-4 with interleaved pairs, as Hugging Face does, so
//! q/k rows are stored as Hugging Face's.

use mlx::Result;
use plugin_api::gguf::{get, key_error, read_config, require, DECODER_KEYS};
use plugin_api::FamilyConfig;
use serde_json::{json, Value};

/// The metadata key prefix.
const ARCH: &str = "glm4";

/// llama.cpp's block names that GLM-4 (Hugging Face) names its own way:
/// the norms after the attention and after the MLP, the pre-MLP norm, and
/// `ffn_up`, which holds gate and up as one matrix.
pub const NAMES: &[(&str, &str)] = &[
    ("post_attention_norm", "post_self_attn_layernorm"),
    ("post_ffw_norm", "post_mlp_layernorm"),
    ("ffn_up", "mlp.gate_up_proj"),
];

/// glm4's config: the rotated fraction of each head from
/// `glm4.rope.dimension_count` over the head size; q/k/v biases, which
/// every GLM-4 has (llama.cpp keeps no flag for them).
pub fn glm4_config<C: FamilyConfig>(raw: &Value) -> Result<C> {
    read_config(raw, ARCH, &[DECODER_KEYS], |c| {
        require(raw, ARCH, "rope.dimension_count")?;
        require(raw, ARCH, "attention.key_length")?;
        let rope = get(raw, ARCH, "rope.dimension_count").and_then(Value::as_f64);
        let head = get(raw, ARCH, "attention.key_length").and_then(Value::as_f64);
        let (Some(rope), Some(head)) = (rope, head.filter(|h| *h > 0.0)) else {
            return Err(key_error(ARCH, "rope.dimension_count", "and the head size are not positive numbers"));
        };
        c.insert("partial_rotary_factor".into(), json!(rope / head));
        c.insert("attention_bias".into(), json!(true));
        Ok(())
    })
}
