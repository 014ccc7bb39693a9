//! GGUF checkpoints of the llama, smollm3 and phi3 architectures:
//! llama.cpp's metadata keys and tensor names in Hugging Face's terms (the
//! shared rules of [`plugin_api::gguf`]), and the q/k row order its rope
//! layout needs undone. Llama 3.1 / 3.2's rope scaling comes as the
//! `rope_freqs` tensor (`plugin_api::gguf::rope_from_freqs`). SmolLM3's
//! file stores no NoPE pattern: llama.cpp leaves rope out of every 4th
//! layer, the config's default here too.
//!
//! Phi-3 / Phi-4-mini (`phi3`): q/k/v stored fused (`attn_qkv`) and gate/up
//! too (`ffn_up`, gate rows first), as Hugging Face stores them; NeoX rope,
//! so nothing is permuted. The rotated features are
//! `phi3.rope.dimension_count` (partial rotation). LongRoPE (the 128k
//! models, Phi-4-mini) keeps its per-pair factors in tensors
//! (`rope_factors_long` / `rope_factors_short`) and its magnitude scale in
//! `phi3.rope.scaling.attn_factor`: the family ropes with the long factors
//! at every length, as mlx-lm does (llama.cpp picks the short ones for a
//! context within the original). `phi3.attention.sliding_window` is not
//! read: llama.cpp turns Phi-3's window off, and mlx-lm has none.

use mlx::{Error, Result};
use plugin_api::config::field;
use plugin_api::gguf::{self as g, Key, DECODER_KEYS};
use serde_json::{json, Map, Value};

/// The metadata key prefix (`general.architecture`) of Llama's files.
const ARCH: &str = "llama";
/// SmolLM3's.
const SMOLLM3: &str = "smollm3";
/// Phi-3's and Phi-4-mini's.
const PHI3: &str = "phi3";
/// The tensor holding LongRoPE's long factors (one per rotated pair).
pub const LONG_FACTORS: &str = "rope_factors_long.weight";
/// LongRoPE's short factors, which mlx-lm (and famlx) never rope with.
const SHORT_FACTORS: &str = "rope_factors_short.weight";
/// Phi-3's fused projections under Hugging Face's names.
const PHI3_NAMES: &[(&str, &str)] = &[("attn_qkv", "self_attn.qkv_proj"), ("ffn_up", "mlp.gate_up_proj")];
/// The metadata keys llama reads: a decoder's, and the experts of a
/// Mixtral file (which llama.cpp's converter writes as `llama`).
const KEYS: &[&[Key]] = &[
    DECODER_KEYS,
    &[("num_local_experts", "expert_count"), ("num_experts_per_tok", "expert_used_count")],
    &[("original_max_position_embeddings", "rope.scaling.original_context_length")],
];

/// The config.json a GGUF file's metadata describes (the vocabulary from
/// the tokenizer when the metadata has no size). The head is decided at
/// build time, from whether `output.weight` exists.
pub fn config(meta: &Value) -> Result<Value> {
    let arch = arch(meta);
    let mut c = g::config(meta, arch, KEYS)?;
    if arch == SMOLLM3 {
        c.insert("model_type".into(), json!(SMOLLM3));
    }
    if arch == PHI3 {
        phi3(meta, &mut c)?;
    }
    if !c.contains_key("vocab_size") {
        c.insert("vocab_size".into(), json!(field::<i64>(meta, "tokenizer.ggml.tokens.count")?));
    }
    c.insert("gguf".into(), json!(true));
    Ok(Value::Object(c))
}

/// The metadata key prefix of a file this family reads.
pub fn arch(meta: &Value) -> &'static str {
    match meta.get("model_type").and_then(Value::as_str) {
        Some(SMOLLM3) => SMOLLM3,
        Some(PHI3) => PHI3,
        _ => ARCH,
    }
}

/// An error about a config field, in the GGUF metadata's own key names.
pub fn rename_fields(e: Error) -> Error {
    rename_fields_of(e, ARCH)
}

/// [`rename_fields`] for a file of architecture `arch`.
pub fn rename_fields_of(e: Error, arch: &str) -> Error {
    g::rename_fields(e, arch, KEYS)
}

/// Phi-3's config fields beyond a decoder's: the partial rotation and
/// LongRoPE, whose long factors are placeholders the family replaces from
/// [`LONG_FACTORS`] at build time.
fn phi3(meta: &Value, c: &mut Map<String, Value>) -> Result<()> {
    c.insert("model_type".into(), json!(PHI3));
    let n = |k: &str| c.get(k).and_then(Value::as_i64).unwrap_or(0);
    let head_dim = match n("head_dim") {
        0 if n("num_attention_heads") > 0 => n("hidden_size") / n("num_attention_heads"),
        d => d,
    };
    if head_dim <= 0 {
        // The width or head count is missing: parsing names it.
        return Ok(());
    }
    if let Some(v) = g::get(meta, PHI3, "rope.dimension_count") {
        let dims = v.as_i64().filter(|&d| d > 0 && d <= head_dim && d % 2 == 0).ok_or_else(|| {
            g::key_error(
                PHI3,
                "rope.dimension_count",
                &format!("is {v}, not an even count up to the head size {head_dim}"),
            )
        })?;
        c.insert("partial_rotary_factor".into(), json!(dims as f64 / head_dim as f64));
    }
    if let Some(mscale) = g::get(meta, PHI3, "rope.scaling.attn_factor") {
        let dims = (head_dim as f64 * c.get("partial_rotary_factor").and_then(Value::as_f64).unwrap_or(1.0)) as usize;
        let ones = vec![1.0; dims / 2];
        c.insert("rope_scaling".into(), json!({"type": "longrope", "long_factor": ones, "long_mscale": mscale}));
    }
    Ok(())
}

/// GGUF tensor names → Hugging Face names (`None`: not a model weight).
pub fn tensor_name(name: &str) -> Option<String> {
    g::tensor_name(name, &[])
}

/// A phi3 file's tensor in Hugging Face's terms (`None`: dropped): the
/// fused projections under their names, LongRoPE's short factors dropped;
/// any other name (the long factors, which the build reads, or one
/// nothing maps, which the host reports unread) as it is.
pub fn phi3_tensor_name(name: &str) -> Option<String> {
    (name != SHORT_FACTORS).then(|| g::hf_name(name, PHI3_NAMES))
}

pub use plugin_api::gguf::unpermute;
