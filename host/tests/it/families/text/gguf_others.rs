//! GGUF files of seed_oss, hunyuan_v1_dense, ernie4_5, ernie4_5_moe and apertus,
//! written by llama.cpp's own converter from the f32 fixtures
//! (`fixtures/make_gguf_others.py`): each holds its fixture's weights, so
//! mlx-lm's numbers in the fixture's expected.json are the reference (f32
//! tolerances), as in `gguf.rs`.

use super::gguf::{parity, refused_without_key};

/// q/k/v biases; the pre-MLP norm under llama.cpp's `post_attention_norm`.
#[test]
fn seed_oss_f32() {
    parity("seed_oss-f32.gguf", "seed_oss-f32", "seed_oss", true);
}

/// The NTK-alpha rope comes folded into the stored base; q/k norms after
/// the rope; a tied head.
#[test]
fn hunyuan_v1_dense_f32() {
    parity("hunyuan_v1_dense-f32.gguf", "hunyuan_v1_dense-f32", "hunyuan_v1_dense", true);
}

/// Interleaved rope pairs, stored unpermuted; a tied head.
#[test]
fn ernie4_5_f32() {
    parity("ernie4_5-f32.gguf", "ernie4_5-f32", "ernie4_5", true);
}

/// Stacked experts, ERNIE's shared experts, a leading dense layer.
#[test]
fn ernie4_5_moe_f32() {
    parity("ernie4_5_moe-f32.gguf", "ernie4_5_moe-f32", "ernie4_5_moe", true);
}

/// The xIELU parameters come as metadata, llama3 rope scaling as
/// `rope_freqs` factors; llama.cpp's names of Apertus's norms.
#[test]
fn apertus_f32() {
    parity("apertus-f32.gguf", "apertus-f32", "apertus", true);
}

/// Metadata a family needs and the file lacks is refused naming the key:
/// apertus's xIELU arrays (its own keys) and a standard one.
#[test]
fn a_missing_metadata_key_is_named() {
    let _g = crate::common::mlx_lock();
    for (file, key) in [
        ("apertus-f32.gguf", "xielu.alpha_n"),
        ("seed_oss-f32.gguf", "seed_oss.attention.head_count"),
        ("ernie4_5_moe-f32.gguf", "ernie4_5-moe.expert_count"),
    ] {
        refused_without_key(file, key);
    }
}
