//! GGUF files of gemma2 and qwen2_moe, written by llama.cpp's own converter
//! from the f32 fixtures (`fixtures/make_gguf_llamalike.py`): each holds its
//! fixture's weights, so mlx-lm's numbers in the fixture's expected.json are
//! the reference (f32 tolerances), as in `gguf.rs`.

use super::gguf::parity;

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
