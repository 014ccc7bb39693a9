//! GGUF files of the issue-36 families, written by llama.cpp's own
//! converter from the f32 fixtures (`fixtures/make_gguf_text_families.py`,
//! fixtures/gguf-text/): each holds its fixture's weights, so mlx-lm's
//! numbers in the fixture's expected.json are the reference. The prompts
//! are token ids; the tokenizer the file carries is checked against the
//! fixture's tokenizer cases on its own.

use crate::common;

use common::parity::{check_prompts, check_tokenizer};
use common::{expected, fixture, mlx_lock, registry, Scratch};
use famlx::cache::CacheOptions;
use famlx::model::LoadedModel;
use std::path::{Path, PathBuf};

fn gguf(file: &str) -> PathBuf {
    fixture("gguf-text").join(file)
}

pub(crate) fn load(path: &Path) -> Result<LoadedModel, String> {
    LoadedModel::load(path, &registry(), None, CacheOptions::default()).map_err(|e| format!("{e:#}"))
}

/// `file`, served by `family`, against `source`'s expected.json: f32
/// tolerances for an f32 file, the quantized ones otherwise.
pub(crate) fn parity(file: &str, source: &str, family: &str, f32_file: bool) {
    let _g = mlx_lock();
    let exp = expected(source);
    let mut m = load(&gguf(file)).unwrap_or_else(|e| panic!("{file}: load: {e}"));
    assert_eq!(m.family.name, family, "{file}: wrong family");
    let mut errs = check_prompts(file, &mut m, &exp, f32_file);
    errs.extend(check_tokenizer(file, &m, &exp));
    assert!(errs.is_empty(), "{file}: {} mismatches:\n{}", errs.len(), errs.join("\n"));
}

#[test]
fn qwen2_f32() {
    parity("qwen2-f32.gguf", "qwen2-f32", "qwen2", true);
}

/// llama.cpp's own Q8_0 blocks (read as 8-bit affine groups of 32)
/// against mlx-lm's numbers for the weights they hold (dequantized by
/// gguf-py: `qwen2-q8_0.expected.json`), at the quantized tolerances.
#[test]
fn qwen2_q8_0() {
    let _g = mlx_lock();
    let file = "qwen2-q8_0.gguf";
    let text = std::fs::read_to_string(gguf("qwen2-q8_0.expected.json")).unwrap();
    let exp: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(exp["source"], "qwen2-f32");
    let mut m = load(&gguf(file)).unwrap_or_else(|e| panic!("{file}: load: {e}"));
    let errs = check_prompts(file, &mut m, &exp, false);
    assert!(errs.is_empty(), "{file}: {} mismatches:\n{}", errs.len(), errs.join("\n"));
}

#[test]
fn qwen3_moe_f32() {
    parity("qwen3_moe-f32.gguf", "qwen3_moe-f32", "qwen3_moe", true);
}

/// Gemma 3's norms come with the `+1` folded in; the layer pattern and
/// attention scale come from the keys the script adds (see its docstring).
#[test]
fn gemma3_text_f32() {
    parity("gemma3_text-f32.gguf", "gemma3_text-f32", "gemma3", true);
}

#[test]
fn olmo2_f32() {
    parity("olmo2-f32.gguf", "olmo2-f32", "olmo2", true);
}

#[test]
fn starcoder2_f32() {
    parity("starcoder2-f32.gguf", "starcoder2-f32", "starcoder2", true);
}

/// A copy of `file` with metadata key `key` renamed (same length, so the
/// file stays well formed): as if the converter had not written it.
pub(crate) fn without_key(file: &str, key: &str) -> (Scratch, PathBuf) {
    let mut b = std::fs::read(gguf(file)).unwrap();
    let at = b.windows(key.len()).position(|w| w == key.as_bytes()).unwrap_or_else(|| panic!("{file}: no {key}"));
    b[at + key.len() - 1] ^= 0x20;
    let s = Scratch::new("gguf-text-key");
    let p = s.path().join(file);
    std::fs::write(&p, b).unwrap();
    (s, p)
}

/// `file` without metadata `key` is refused in one line naming the key.
pub(crate) fn refused_without_key(file: &str, key: &str) {
    let (_s, p) = without_key(file, key);
    let e = load(&p).err().unwrap_or_else(|| panic!("{file} without {key} loaded"));
    assert!(e.contains(&format!("GGUF metadata: missing `{key}`")), "{file}: {e}");
    assert_eq!(e.lines().count(), 1, "{e}");
}

/// Metadata a family needs and the file lacks is refused naming the key.
#[test]
fn a_missing_metadata_key_is_named() {
    let _g = mlx_lock();
    for (file, key) in [
        ("qwen2-f32.gguf", "qwen2.embedding_length"),
        ("qwen3_moe-f32.gguf", "qwen3moe.expert_count"),
        ("gemma3_text-f32.gguf", "gemma3.block_count"),
        ("olmo2-f32.gguf", "olmo2.attention.head_count"),
        ("starcoder2-f32.gguf", "starcoder2.attention.layer_norm_epsilon"),
    ] {
        refused_without_key(file, key);
    }
}
