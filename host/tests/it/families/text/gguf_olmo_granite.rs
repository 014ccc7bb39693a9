//! GGUF files of olmoe, olmo3, granite, granitemoe, exaone4 and glm4, written by
//! llama.cpp's own converter from the f32 fixtures
//! (`fixtures/make_gguf_olmo_granite.py`, fixtures/gguf-text/): each holds
//! its fixture's weights, so mlx-lm's numbers in the fixture's
//! expected.json are the reference (as in `super::gguf`).

use super::gguf::{parity, refused_without_key};
use crate::common;
use common::parity::{check_prompts, check_tokenizer};
use common::{expected, fixture, mlx_lock, registry};
use famlx::cache::CacheOptions;
use famlx::model::LoadedModel;

/// OLMoE: stacked experts, q/k norms over the whole projection.
#[test]
fn olmoe_f32() {
    parity("olmoe-f32.gguf", "olmoe-f32", "olmoe", true);
}

/// GLM-4: its own names for the sandwich norms and the fused gate/up;
/// partial interleaved rope.
#[test]
fn glm4_f32() {
    parity("glm4-f32.gguf", "glm4-f32", "glm4", true);
}

/// Granite: converted as llama (q/k rows permuted for llama.cpp's rope);
/// its multipliers from llama.cpp's scale keys.
#[test]
fn granite_f32() {
    parity("granite-f32.gguf", "granite-f32", "granite", true);
}

/// Granite MoE: the same, with the router and stacked experts under
/// `block_sparse_moe`.
#[test]
fn granitemoe_f32() {
    parity("granitemoe-f32.gguf", "granitemoe-f32", "granitemoe", true);
}

/// EXAONE 4: its layer pattern from one flag per layer, and its llama3
/// rope scaling from the converter's `rope_freqs` factors.
#[test]
fn exaone4_f32() {
    parity("exaone4-f32.gguf", "exaone4-f32", "exaone4", true);
}

/// OLMo 3, which llama.cpp writes as `olmo2` with sliding-window keys:
/// served by the olmo3 family when asked for (`--family olmo3`); the olmo2
/// family, which claims the architecture, refuses it naming the key.
#[test]
fn olmo3_f32_as_olmo3() {
    let _g = mlx_lock();
    let file = "olmo3-f32.gguf";
    let path = fixture("gguf-text").join(file);
    let load =
        |family| LoadedModel::load(&path, &registry(), family, CacheOptions::default()).map_err(|e| format!("{e:#}"));
    let e = load(None).err().expect("olmo2 family loaded an OLMo 3 file");
    assert!(e.contains("`olmo2.attention.sliding_window`") && e.contains("--family olmo3"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    let mut m = load(Some("olmo3")).unwrap_or_else(|e| panic!("{file}: load: {e}"));
    assert_eq!(m.family.name, "olmo3");
    let exp = expected("olmo3-f32");
    let mut errs = check_prompts(file, &mut m, &exp, true);
    errs.extend(check_tokenizer(file, &m, &exp));
    assert!(errs.is_empty(), "{file}: {} mismatches:\n{}", errs.len(), errs.join("\n"));
}

/// Metadata a family needs and the file lacks is refused naming the key.
#[test]
fn a_missing_metadata_key_is_named() {
    let _g = mlx_lock();
    for (file, key) in [
        ("olmoe-f32.gguf", "olmoe.expert_count"),
        ("granite-f32.gguf", "granite.logit_scale"),
        ("granitemoe-f32.gguf", "granitemoe.expert_used_count"),
        ("exaone4-f32.gguf", "exaone4.attention.key_length"),
        ("glm4-f32.gguf", "glm4.rope.dimension_count"),
    ] {
        refused_without_key(file, key);
    }
}
