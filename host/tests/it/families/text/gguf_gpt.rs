//! GGUF files of phi, phimoe, stablelm, cohere and cohere2, written by
//! llama.cpp's own converter from the f32 fixtures
//! (`fixtures/make_gguf_gpt.py`, fixtures/gguf-text/): each holds its
//! fixture's weights, so mlx-lm's numbers in the fixture's expected.json
//! are the reference (as in `super::gguf`).

use super::gguf::parity;

/// Command R+ (architecture `command-r`): per-head q/k norms, which the
/// metadata does not announce, found among the weights; logits scaled.
#[test]
fn cohere_f32() {
    parity("cohere-f32.gguf", "cohere-f32", "cohere", true);
}

/// Command R7B: the layer pattern from the flags the script adds; the
/// global layers have no rope.
#[test]
fn cohere2_f32() {
    parity("cohere2-f32.gguf", "cohere2-f32", "cohere2", true);
}

/// Phi-2 (architecture `phi2`): the rotated share from the rotary width;
/// the script writes the fixture's KV heads and MLP width, which the
/// converter gives as phi-2's.
#[test]
fn phi_f32() {
    parity("phi-f32.gguf", "phi-f32", "phi", true);
}

/// StableLM 2 12B's layout (architecture `stablelm`): q/k/v biases and
/// per-head q/k norms (stacked by llama.cpp), neither announced by the
/// metadata, found among the weights; parallel residual; partial rope.
#[test]
fn stablelm_f32() {
    parity("stablelm-f32.gguf", "stablelm-f32", "stablelm", true);
}
