//! GGUF files of `olmo2` and `olmoe` (llama.cpp's architectures for OLMo 2
//! and OLMoE; OLMo 3 converts as `olmo2` with sliding-window keys, read by
//! the olmo3 family when asked for: `--family olmo3`): the metadata as the
//! families' configs, on
//! [`plugin_api::gguf`]. llama.cpp's standard names serve (`post_attention_norm` and
//! `post_ffw_norm` are OLMo 2's post-branch norms; OLMoE's stacked experts,
//! `ffn_*_exps`, arrive as mlx-lm's `switch_mlp`); NeoX rope, so q/k rows
//! are stored as Hugging Face's.

use mlx::Result;
use plugin_api::gguf::{
    get, key_error, layer_types, read_config, require, sliding_layers, Key, DECODER_KEYS, MOE_KEYS,
};
use plugin_api::FamilyConfig;
use serde_json::{json, Value};

/// The metadata key prefix.
const ARCH: &str = "olmo2";

/// olmo2's config. llama.cpp writes OLMo 3 under the same architecture,
/// with sliding-window layers: such a file is refused, naming the key.
pub fn olmo2_config<C: FamilyConfig>(raw: &Value) -> Result<C> {
    read_config(raw, ARCH, &[DECODER_KEYS], |_| match get(raw, ARCH, "attention.sliding_window") {
        Some(_) => Err(key_error(
            ARCH,
            "attention.sliding_window",
            "is set: an OLMo 3 file (sliding-window layers), which the olmo2 family does not read (use --family olmo3)",
        )),
        None => Ok(()),
    })
}

/// olmoe's config (GGUF architecture `olmoe`): the experts' width is the
/// feed-forward length, and llama.cpp does not renormalise the top-k
/// weights (Hugging Face's `norm_topk_prob: false`).
pub fn olmoe_config<C: FamilyConfig>(raw: &Value) -> Result<C> {
    read_config(raw, "olmoe", &[DECODER_KEYS, MOE_KEYS], |c| {
        c.insert("norm_topk_prob".into(), json!(false));
        Ok(())
    })
}

/// OLMo 3's sliding window, in llama.cpp's key.
const WINDOW: &[Key] = &[("sliding_window", "attention.sliding_window")];

/// olmo3's config from an `olmo2` file with sliding-window layers: the
/// window (required) and, when the file has the pattern, `layer_types`
/// (without it, olmo3's default: every fourth layer full, as the
/// converter's own default).
pub fn olmo3_config<C: FamilyConfig>(raw: &Value) -> Result<C> {
    read_config(raw, ARCH, &[DECODER_KEYS, WINDOW], |c| {
        require(raw, ARCH, "attention.sliding_window")?;
        if get(raw, ARCH, "attention.sliding_window_pattern").is_some() {
            let layers = get(raw, ARCH, "block_count").and_then(Value::as_u64).unwrap_or(0) as usize;
            c.insert("layer_types".into(), layer_types(&sliding_layers(raw, ARCH, layers, 0)?));
        }
        Ok(())
    })
}
