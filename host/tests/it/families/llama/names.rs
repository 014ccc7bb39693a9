//! The llama family's GGUF name and metadata rules, one name at a time
//! (the end-to-end numerics are in tests/it/cli/default_model.rs and
//! tests/it/robustness/hostile_files.rs), through the family library
//! (`famlx_llama`: the plugin crate's exports cannot share this binary with
//! qwen3_5's).

use famlx_llama::gguf;
use mlx::{Array, Error};
use serde_json::json;

#[test]
fn gguf_names_map_to_hugging_face() {
    let n = gguf::tensor_name;
    assert_eq!(n("token_embd.weight").as_deref(), Some("model.embed_tokens.weight"));
    assert_eq!(n("output.scales").as_deref(), Some("lm_head.scales"));
    assert_eq!(n("blk.11.attn_k.biases").as_deref(), Some("model.layers.11.self_attn.k_proj.biases"));
    assert_eq!(n("blk.0.ffn_norm.weight").as_deref(), Some("model.layers.0.post_attention_layernorm.weight"));
    assert_eq!(n("rope_freqs.weight"), None);
    assert_eq!(n("blk.0.mystery.weight"), None);
    assert_eq!(n("nodot"), None);
}

#[test]
fn gguf_metadata_becomes_a_config() {
    let meta = json!({"llama.embedding_length": 64, "llama.block_count": 2, "tokenizer.ggml.tokens.count": 512});
    let c = gguf::config(&meta).unwrap();
    assert_eq!(c["hidden_size"], 64);
    assert_eq!(c["num_hidden_layers"], 2);
    assert_eq!(c["vocab_size"], 512);
    assert_eq!(c["gguf"], true);
    let e = gguf::rename_fields(Error::msg("config: field `num_key_value_heads` is 0, must be at least 1"));
    assert_eq!(e.msg, "GGUF metadata `llama.attention.head_count_kv` is 0, must be at least 1");
}

#[test]
fn gguf_unpermute_restores_rope_halves() {
    let _g = crate::common::mlx_lock();
    // One head of dim 4: llama.cpp rows [0, 2, 1, 3] (interleaved pairs) back to [0, 1, 2, 3].
    let t = Array::from_slice(&[0f32, 2.0, 1.0, 3.0], &[4, 1]).unwrap();
    assert_eq!(gguf::unpermute(&t, 1).unwrap().to_vec::<f32>().unwrap(), [0.0, 1.0, 2.0, 3.0]);
}
