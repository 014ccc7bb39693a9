//! GGUF files of `qwen3` (llama.cpp's architecture for dense Qwen3): the
//! metadata as the family's config, on [`plugin_api::gguf`]. Qwen2's
//! layout plus per-head q/k norms (`attn_q_norm` / `attn_k_norm`), no q/k/v
//! biases; NeoX rope, so q/k rows are stored as Hugging Face's and
//! llama.cpp's standard tensor names serve.

use mlx::Result;
use plugin_api::gguf::{read_config, DECODER_KEYS};
use plugin_api::FamilyConfig;
use serde_json::{json, Value};

/// The metadata key prefix (`general.architecture`).
const ARCH: &str = "qwen3";

/// qwen3's config: config.json, or a GGUF file's metadata. A file without
/// `qwen3.attention.key_length` has heads of `hidden / heads` features, as
/// llama.cpp reads it.
pub fn config<C: FamilyConfig>(raw: &Value) -> Result<C> {
    read_config(raw, ARCH, &[DECODER_KEYS], |c| {
        if !c.contains_key("head_dim") {
            let n = |k: &str| c.get(k).and_then(Value::as_i64).unwrap_or(0);
            let (hidden, heads) = (n("hidden_size"), n("num_attention_heads"));
            if heads > 0 {
                c.insert("head_dim".into(), json!(hidden / heads));
            }
        }
        Ok(())
    })
}
