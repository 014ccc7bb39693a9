//! GGUF files of gemma2, qwen2_moe, smollm3, ministral3 and mixtral,
//! written by llama.cpp's own converter from the f32 fixtures
//! (`fixtures/make_gguf_llamalike.py`): each holds its fixture's weights,
//! so mlx-lm's numbers in the fixture's expected.json are the reference
//! (f32 tolerances), as in `gguf.rs`, or, where llama.cpp reads the file as
//! another model (smollm3's rope, ministral3's window), mlx-lm's numbers
//! for that model.

use super::gguf::{parity, refused_without_key};
use crate::common::parity::{check_prompts, check_tokenizer};
use crate::common::{expected, fixture, mlx_lock, registry};
use famlx::cache::CacheOptions;
use famlx::model::LoadedModel;

/// Gemma 2's norms come with the `+1` folded in; the attention scale comes
/// from the key the script adds (see its docstring).
#[test]
fn gemma2_f32() {
    parity("gemma2-f32.gguf", "gemma2-f32", "gemma2", true);
}

/// Stacked experts, the shared expert and its sigmoid gate, q/k/v biases.
#[test]
fn qwen2_moe_f32() {
    parity("qwen2_moe-f32.gguf", "qwen2_moe-f32", "qwen2_moe", true);
}

/// Mixtral is llama.cpp's `llama` architecture with experts
/// (`llama.expert_count`), served by the llama family: q/k rows unpermuted,
/// the stacked experts routed as mlx-lm's mixtral routes them.
#[test]
fn mixtral_f32() {
    parity("mixtral-f32.gguf", "mixtral-f32", "llama", true);
}

/// `file` against mlx-lm's numbers for the model llama.cpp reads from it
/// (`{source}.expected.json` beside it, the fixture's prompts), where its
/// rules make that another model than the fixture; the tokenizer the file
/// carries against the fixture's cases.
fn parity_llama_cpp_rules(file: &str, source: &str, family: &str) {
    let _g = mlx_lock();
    let dir = fixture("gguf-text");
    let text = std::fs::read_to_string(dir.join(format!("{source}.expected.json"))).unwrap();
    let exp: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(exp["source"], source);
    let mut m = LoadedModel::load(&dir.join(file), &registry(), None, CacheOptions::default())
        .unwrap_or_else(|e| panic!("{file}: load: {e:#}"));
    assert_eq!(m.family.name, family, "{file}: wrong family");
    let mut errs = check_prompts(file, &mut m, &exp, true);
    errs.extend(check_tokenizer(file, &m, &expected(source)));
    assert!(errs.is_empty(), "{file}: {} mismatches:\n{}", errs.len(), errs.join("\n"));
}

/// SmolLM3's file carries no NoPE pattern: llama.cpp (and famlx) leave
/// rope out of every 4th layer, so both of the fixture's 2 layers rope,
/// where the fixture's `no_rope_layers` leaves layer 1 without.
#[test]
fn smollm3_f32() {
    parity_llama_cpp_rules("smollm3-f32.gguf", "smollm3-f32", "llama");
}

/// Ministral 3 (GGUF architecture `mistral3`, served by the mistral3
/// family): q/k rows unpermuted, YaRN and the position-scaled queries from
/// llama.cpp's keys; no sliding window (llama.cpp has none for it), where
/// the fixture's layer 0 slides.
#[test]
fn ministral3_f32() {
    parity_llama_cpp_rules("ministral3-f32.gguf", "ministral3-f32", "mistral3");
}

/// Metadata a family needs and the file lacks is refused naming the key.
#[test]
fn a_missing_metadata_key_is_named() {
    let _g = mlx_lock();
    for (file, key) in [
        ("gemma2-f32.gguf", "gemma2.block_count"),
        ("qwen2_moe-f32.gguf", "qwen2moe.expert_count"),
        ("smollm3-f32.gguf", "smollm3.embedding_length"),
        ("ministral3-f32.gguf", "mistral3.embedding_length"),
        ("mixtral-f32.gguf", "llama.expert_used_count"),
    ] {
        refused_without_key(file, key);
    }
}
