//! GGUF files of `mistral3` (llama.cpp's architecture for Ministral 3's
//! text model and Mistral Small 3.x's): the metadata as ministral3's config
//! and the tensors under Hugging Face's names, on [`plugin_api::gguf`].
//!
//! llama.cpp's conventions, undone or followed here:
//! - its converter permutes q/k rows for its rope layout (as for llama),
//!   undone here;
//! - YaRN from `mistral3.rope.scaling.*`: `yarn_log_multiplier` is
//!   `mscale_all_dim`, and `mscale` is taken as 1, as llama.cpp takes it;
//! - queries scaled by position by `mistral3.attention.temperature_scale`
//!   (Llama 4's `llama_4_scaling_beta`) over spans of the YaRN original
//!   context; none when the key is absent;
//! - no sliding window: llama.cpp runs every mistral3 layer on the whole
//!   context.

use mlx::{Array, Result};
use plugin_api::gguf::{get, hf_name, read_config, tensor_name, DECODER_KEYS};
use plugin_api::FamilyConfig;
use serde_json::{json, Map, Value};

/// The metadata key prefix.
const ARCH: &str = "mistral3";

/// ministral3's config (`C`) from a GGUF file's metadata.
pub fn config<C: FamilyConfig>(raw: &Value) -> Result<C> {
    read_config(raw, ARCH, &[DECODER_KEYS], |c| fill(raw, c))
}

/// ministral3's `rope_parameters`: the rope base, its scaling and the
/// query scaling, from the keys llama.cpp reads.
fn fill(raw: &Value, c: &mut Map<String, Value>) -> Result<()> {
    let key = |k: &str| get(raw, ARCH, k).cloned();
    let mut p = match c.remove("rope_scaling") {
        Some(Value::Object(s)) => s,
        _ => Map::new(),
    };
    let kind = p.remove("type").unwrap_or(json!("default"));
    if kind == "yarn" {
        for (field, k) in [("beta_fast", "rope.scaling.yarn_beta_fast"), ("beta_slow", "rope.scaling.yarn_beta_slow")] {
            if let Some(v) = key(k) {
                p.insert(field.into(), v);
            }
        }
        p.insert("mscale".into(), json!(1.0));
        p.insert("mscale_all_dim".into(), key("rope.scaling.yarn_log_multiplier").unwrap_or(json!(0.0)));
    }
    p.insert("rope_type".into(), kind);
    // llama.cpp's rope base when the file has none.
    p.insert("rope_theta".into(), c.get("rope_theta").cloned().unwrap_or(json!(10000.0)));
    p.insert("llama_4_scaling_beta".into(), key("attention.temperature_scale").unwrap_or(json!(0.0)));
    // The query scaling's span: the YaRN original context, else the trained one.
    let span = p.get("original_max_position_embeddings").filter(|v| !v.is_null()).cloned();
    let span = span.or_else(|| key("context_length")).unwrap_or(json!(1));
    p.insert("original_max_position_embeddings".into(), span);
    c.insert("rope_parameters".into(), Value::Object(p));
    Ok(())
}

/// A checkpoint tensor: a GGUF name as Hugging Face's, q/k rows in Hugging
/// Face's order (`heads` and `kv_heads` heads); any other as it is.
pub fn tensor(name: &str, t: Array, heads: i32, kv_heads: i32) -> Result<(String, Array)> {
    if tensor_name(name, &[]).is_none() {
        return Ok((name.to_string(), t));
    }
    let hf = hf_name(name, &[]);
    let t = if hf.contains("self_attn.q_proj.") {
        plugin_api::gguf::unpermute(&t, heads)?
    } else if hf.contains("self_attn.k_proj.") {
        plugin_api::gguf::unpermute(&t, kv_heads)?
    } else {
        t
    };
    Ok((hf, t))
}
