//! GGUF checkpoints of the llama architecture: llama.cpp's metadata keys
//! and tensor names in Hugging Face's terms, and the q/k row order its rope
//! layout needs undone.

use mlx::{Array, Error, Result};
use plugin_api::config::field;
use serde_json::{json, Map, Value};

/// llama.cpp's metadata keys (under `llama.`) for the config fields.
const KEYS: [(&str, &str); 10] = [
    ("hidden_size", "embedding_length"),
    ("num_hidden_layers", "block_count"),
    ("intermediate_size", "feed_forward_length"),
    ("num_attention_heads", "attention.head_count"),
    ("num_key_value_heads", "attention.head_count_kv"),
    ("head_dim", "attention.key_length"),
    ("rms_norm_eps", "attention.layer_norm_rms_epsilon"),
    ("rope_theta", "rope.freq_base"),
    ("max_position_embeddings", "context_length"),
    ("vocab_size", "vocab_size"),
];

/// The config.json a GGUF file's metadata describes (the vocabulary from
/// the tokenizer when the metadata has no size). The head is decided at
/// build time, from whether `output.weight` exists.
pub fn config(meta: &Value) -> Result<Value> {
    let mut c = Map::new();
    for (hf, key) in KEYS {
        if let Some(v) = meta.get(format!("llama.{key}")).filter(|v| !v.is_null()) {
            c.insert(hf.to_string(), v.clone());
        }
    }
    if !c.contains_key("vocab_size") {
        c.insert("vocab_size".into(), json!(field::<i64>(meta, "tokenizer.ggml.tokens.count")?));
    }
    c.insert("gguf".into(), json!(true));
    Ok(Value::Object(c))
}

/// An error about a config field, in the GGUF metadata's own key names.
pub fn rename_fields(e: Error) -> Error {
    let mut m =
        e.msg.replace("config: field", "GGUF metadata").replace("config: missing field", "GGUF metadata: missing");
    for (hf, key) in KEYS {
        m = m.replace(&format!("`{hf}`"), &format!("`llama.{key}`"));
    }
    Error { msg: m.replace("`llama.vocab_size`", "`llama.vocab_size` (or the tokenizer's token count)"), ..e }
}

/// GGUF tensor names → Hugging Face names (`None`: not a model weight).
pub fn tensor_name(name: &str) -> Option<String> {
    let (base, suffix) = name.rsplit_once('.')?;
    let mapped = match base {
        "token_embd" => "model.embed_tokens".to_string(),
        "output_norm" => "model.norm".to_string(),
        "output" => "lm_head".to_string(),
        "rope_freqs" => return None,
        _ => {
            let rest = base.strip_prefix("blk.")?;
            let (n, part) = rest.split_once('.')?;
            let hf = match part {
                "attn_norm" => "input_layernorm",
                "ffn_norm" => "post_attention_layernorm",
                "attn_q" => "self_attn.q_proj",
                "attn_k" => "self_attn.k_proj",
                "attn_v" => "self_attn.v_proj",
                "attn_output" => "self_attn.o_proj",
                "ffn_gate" => "mlp.gate_proj",
                "ffn_up" => "mlp.up_proj",
                "ffn_down" => "mlp.down_proj",
                _ => return None,
            };
            format!("model.layers.{n}.{hf}")
        }
    };
    Some(format!("{mapped}.{suffix}"))
}

/// Undoes llama.cpp's q/k row permutation (rows grouped per head as
/// [head, head_dim/2, 2] back to [head, 2, head_dim/2]).
pub fn unpermute(t: &Array, heads: i32) -> Result<Array> {
    let shape = t.shape().to_vec();
    let rows = shape[0];
    let mut s = vec![heads, rows / heads / 2, 2];
    s.extend_from_slice(&shape[1..]);
    t.reshape(&s)?.swapaxes(1, 2)?.reshape(&shape)
}
