//! GGUF files of phi, phimoe, stablelm, cohere and cohere2, written by
//! llama.cpp's own converter from the f32 fixtures
//! (`fixtures/make_gguf_gpt.py`, fixtures/gguf-text/): each holds its
//! fixture's weights, so mlx-lm's numbers in the fixture's expected.json
//! are the reference (as in `super::gguf`).

use super::gguf::{load, parity, refused_without_key};
use crate::common::parity::{check_prompts, check_tokenizer};
use crate::common::{expected, fixture, mlx_lock};

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

/// Phi-3.5-MoE's layout (architecture `phimoe`): stacked experts under
/// sparsemixer routing; LongRoPE's factors read from the file's tensor and
/// its magnitude scale from `phimoe.rope.scaling.attn_factor`, which
/// llama.cpp's converter computes from the context stretch rather than
/// keeping the checkpoint's `long_mscale`; so the reference is mlx-lm's
/// numbers for the fixture with that scale (`phimoe-f32.expected.json`,
/// written by the script).
#[test]
fn phimoe_f32() {
    let _g = mlx_lock();
    let file = "phimoe-f32.gguf";
    let dir = fixture("gguf-text");
    let text = std::fs::read_to_string(dir.join("phimoe-f32.expected.json")).unwrap();
    let exp: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(exp["source"], "phimoe-f32");
    let mut m = load(&dir.join(file)).unwrap_or_else(|e| panic!("{file}: load: {e}"));
    assert_eq!(m.family.name, "phimoe");
    let mut errs = check_prompts(file, &mut m, &exp, true);
    errs.extend(check_tokenizer(file, &m, &expected("phimoe-f32")));
    assert!(errs.is_empty(), "{file}: {} mismatches:\n{}", errs.len(), errs.join("\n"));
}

/// Metadata a family needs and the file lacks is refused naming the key.
#[test]
fn a_missing_metadata_key_is_named() {
    let _g = mlx_lock();
    for (file, key) in [
        ("phi-f32.gguf", "phi2.rope.dimension_count"),
        ("phimoe-f32.gguf", "phimoe.expert_count"),
        ("stablelm-f32.gguf", "stablelm.attention.layer_norm_epsilon"),
        ("cohere-f32.gguf", "command-r.logit_scale"),
        ("cohere2-f32.gguf", "cohere2.attention.sliding_window"),
    ] {
        refused_without_key(file, key);
    }
}
