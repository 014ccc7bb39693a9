//! GGUF files of olmoe, granite, granitemoe, exaone4 and glm4, written by
//! llama.cpp's own converter from the f32 fixtures
//! (`fixtures/make_gguf_olmo_granite.py`, fixtures/gguf-text/): each holds
//! its fixture's weights, so mlx-lm's numbers in the fixture's
//! expected.json are the reference (as in `super::gguf`).

use super::gguf::parity;

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
