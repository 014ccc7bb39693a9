//! GGUF files of gemma2, qwen2_moe and smollm3, written by llama.cpp's own
//! converter from the f32 fixtures (`fixtures/make_gguf_llamalike.py`):
//! each holds its fixture's weights, so mlx-lm's numbers in the fixture's
//! expected.json are the reference (f32 tolerances), as in `gguf.rs`.

use super::gguf::parity;
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

/// SmolLM3's file carries no NoPE pattern: llama.cpp (and famlx) leave
/// rope out of every 4th layer, so both of the fixture's 2 layers rope,
/// where the fixture's `no_rope_layers` leaves layer 1 without. The
/// reference is mlx-lm's numbers for that model
/// (`smollm3-f32.expected.json`, same prompts); the tokenizer the file
/// carries against the fixture's cases.
#[test]
fn smollm3_f32() {
    let _g = mlx_lock();
    let file = "smollm3-f32.gguf";
    let dir = fixture("gguf-text");
    let text = std::fs::read_to_string(dir.join("smollm3-f32.expected.json")).unwrap();
    let exp: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(exp["source"], "smollm3-f32");
    let mut m = LoadedModel::load(&dir.join(file), &registry(), None, CacheOptions::default())
        .unwrap_or_else(|e| panic!("{file}: load: {e:#}"));
    assert_eq!(m.family.name, "llama", "{file}: wrong family");
    let mut errs = check_prompts(file, &mut m, &exp, true);
    errs.extend(check_tokenizer(file, &m, &expected("smollm3-f32")));
    assert!(errs.is_empty(), "{file}: {} mismatches:\n{}", errs.len(), errs.join("\n"));
}
