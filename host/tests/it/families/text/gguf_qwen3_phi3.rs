//! GGUF files of qwen3 and phi3 (llama.cpp's architectures of those
//! names) and of Llama 3, written by llama.cpp's own converter from the
//! bf16 fixtures `qwen3-bf16`, `phi3-bf16` and `llama-bf16`
//! (`fixtures/make_gguf_qwen3_phi3.py`, as f32): each against mlx-lm's numbers for the same weights in float32
//! (`{name}-f32.expected.json` beside it, the fixture's prompts) at f32
//! tolerances, and the tokenizer the file carries against the fixture's
//! tokenizer cases.

use super::gguf::refused_without_key;
use crate::common::parity::{check_prompts, check_tokenizer};
use crate::common::{expected, fixture, mlx_lock, registry};
use famlx::cache::CacheOptions;
use famlx::model::LoadedModel;

/// `{name}-f32.gguf`, served by `family`, against
/// `{name}-f32.expected.json` (mlx-lm on fixture `source`'s weights).
fn parity(name: &str, source: &str, family: &str) {
    let _g = mlx_lock();
    let dir = fixture("gguf-text");
    let file = format!("{name}-f32.gguf");
    let text = std::fs::read_to_string(dir.join(format!("{name}-f32.expected.json"))).unwrap();
    let exp: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(exp["source"], source);
    let mut m = LoadedModel::load(&dir.join(&file), &registry(), None, CacheOptions::default())
        .unwrap_or_else(|e| panic!("{file}: load: {e:#}"));
    assert_eq!(m.family.name, family, "{file}: wrong family");
    let mut errs = check_prompts(&file, &mut m, &exp, true);
    errs.extend(check_tokenizer(&file, &m, &expected(source)));
    assert!(errs.is_empty(), "{file}: {} mismatches:\n{}", errs.len(), errs.join("\n"));
}

/// Per-head q/k norms, no biases, a tied head (the file has no `output`).
#[test]
fn qwen3_f32() {
    parity("qwen3", "qwen3-bf16", "qwen3");
}

/// Phi-3 with LongRoPE (as the 128k models and Phi-4-mini): fused q/k/v
/// and gate/up, partial rotation from `phi3.rope.dimension_count`, the long
/// factors from the file's `rope_factors_long` tensor and the magnitude
/// scale from `phi3.rope.scaling.attn_factor`.
#[test]
fn phi3_longrope_f32() {
    parity("phi3", "phi3-bf16", "llama");
}

/// Phi-3 as the 4k models are: no rope scaling, and a sliding window
/// (`phi3.attention.sliding_window`) that neither llama.cpp nor mlx-lm
/// applies.
#[test]
fn phi3_4k_f32() {
    parity("phi3_4k", "phi3-bf16", "llama");
}

/// Llama 3.1 / 3.2 as llama.cpp's converter writes them (architecture
/// `llama`): q/k rows unpermuted, the llama3 rope scaling from the
/// `rope_freqs` tensor.
#[test]
fn llama3_f32() {
    parity("llama3", "llama-bf16", "llama");
}

/// Metadata a family needs and the file lacks is refused naming the key.
#[test]
fn a_missing_metadata_key_is_named() {
    let _g = mlx_lock();
    for (file, key) in [
        ("qwen3-f32.gguf", "qwen3.block_count"),
        ("qwen3-f32.gguf", "qwen3.attention.head_count_kv"),
        ("phi3-f32.gguf", "phi3.embedding_length"),
        ("phi3_4k-f32.gguf", "phi3.attention.head_count"),
    ] {
        refused_without_key(file, key);
    }
}
