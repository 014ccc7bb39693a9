//! GGUF files of `cohere` and `cohere2` (llama.cpp's architectures
//! `command-r` and `cohere2`): the metadata as the families' configs, on
//! [`plugin_api::gguf`]. llama.cpp's standard tensor names serve (Command
//! R+'s per-head q/k norms are `attn_q_norm` / `attn_k_norm`, stored
//! `[heads, head_dim]` as Hugging Face's); llama.cpp ropes Cohere's
//! interleaved pairs itself, so q/k rows are stored as Hugging Face's.

use mlx::Result;
use plugin_api::gguf::{get, key_error, read_config, require, sliding_layers, Key, DECODER_KEYS};
use plugin_api::FamilyConfig;
use serde_json::{json, Map, Value};

/// Cohere's LayerNorm epsilon and logit scale (llama.cpp requires both).
const COHERE_KEYS: &[Key] = &[("layer_norm_eps", "attention.layer_norm_epsilon"), ("logit_scale", "logit_scale")];

/// The keys llama.cpp requires of both architectures beyond the common ones.
fn require_cohere(raw: &Value, arch: &str) -> Result<()> {
    require(raw, arch, "attention.layer_norm_epsilon")?;
    require(raw, arch, "logit_scale")
}

/// Refuses rope scaling (the families rope at a plain base, as mlx-lm
/// does) and a rotary width other than the whole head.
fn plain_rope(raw: &Value, arch: &str, c: &Map<String, Value>, head_dim: Option<i64>) -> Result<()> {
    if let Some(s) = c.get("rope_scaling") {
        let kind = s.get("type").and_then(Value::as_str).unwrap_or("?");
        return Err(key_error(arch, "rope.scaling.type", &format!("is `{kind}`, which the family does not implement")));
    }
    let dims = get(raw, arch, "rope.dimension_count").and_then(Value::as_i64);
    match (dims, head_dim) {
        (Some(n), Some(d)) if n != d => {
            Err(key_error(arch, "rope.dimension_count", &format!("is {n}, not the head size {d} (partial rotary)")))
        }
        _ => Ok(()),
    }
}

/// The head size the metadata implies (hidden / heads), when both are there.
fn implied_head_dim(c: &Map<String, Value>) -> Option<i64> {
    let (h, n) = (c.get("hidden_size")?.as_i64()?, c.get("num_attention_heads")?.as_i64()?);
    (n > 0).then(|| h / n)
}

/// cohere's config (GGUF architecture `command-r`). The metadata does not
/// say whether Command R+'s q/k norms are there: the family looks for them
/// among the weights.
pub fn cohere_config<C: FamilyConfig>(raw: &Value) -> Result<C> {
    const ARCH: &str = "command-r";
    read_config(raw, ARCH, &[DECODER_KEYS, COHERE_KEYS], |c| {
        require_cohere(raw, ARCH)?;
        plain_rope(raw, ARCH, c, implied_head_dim(c))?;
        c.insert("qk_norm_from_weights".into(), json!(true));
        Ok(())
    })
}

/// cohere2's config (GGUF architecture `cohere2`): the converter drops
/// Cohere 2's all-zero biases, and the layer pattern (an array of flags,
/// or a number) becomes the family's every-n-th-layer-global pattern.
pub fn cohere2_config<C: FamilyConfig>(raw: &Value) -> Result<C> {
    const ARCH: &str = "cohere2";
    const KEYS: &[Key] = &[("sliding_window", "attention.sliding_window")];
    read_config(raw, ARCH, &[DECODER_KEYS, COHERE_KEYS, KEYS], |c| {
        require_cohere(raw, ARCH)?;
        require(raw, ARCH, "attention.sliding_window")?;
        let head_dim = c.get("head_dim").and_then(Value::as_i64).or_else(|| implied_head_dim(c));
        plain_rope(raw, ARCH, c, head_dim)?;
        let layers = c.get("num_hidden_layers").and_then(Value::as_u64).unwrap_or(0) as usize;
        // llama.cpp's default for cohere2: three sliding layers to one global.
        let sliding = sliding_layers(raw, ARCH, layers, 4)?;
        let every = sliding.iter().position(|s| !s).map_or(layers + 1, |i| i + 1);
        if sliding.iter().enumerate().any(|(i, &s)| s != ((i + 1) % every != 0)) {
            return Err(key_error(
                ARCH,
                "attention.sliding_window_pattern",
                "is not every n-th layer global, which the cohere2 family does not implement",
            ));
        }
        c.insert("sliding_window_pattern".into(), json!(every));
        c.insert("attention_bias".into(), json!(false));
        c.insert("layer_norm_bias".into(), json!(false));
        Ok(())
    })
}
