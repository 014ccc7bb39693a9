//! Inputs the fuzz targets (fuzz/) found failing, kept as regression tests:
//! each must now give an error (or a result), never a panic.

mod common;

use famlx_text::Tokenizer;
use std::path::Path;

fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures").join(name)
}

/// fuzz/tokenizer: invalid UTF-8 bytes inside a decoder's key made the
/// `tokenizers` library panic while deserializing the decoder.
#[test]
fn tokenizer_json_with_invalid_utf8_in_the_decoder() {
    let dir = common::temp_dir("fuzz-tok");
    let src = fixture("qwen3-bf16");
    for f in ["tokenizer_config.json", "chat_template.jinja"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    let tok = std::fs::read(src.join("tokenizer.json")).unwrap();
    let at = tok.windows(10).rposition(|w| w == b"\"use_regex").expect("the decoder's use_regex") + 2;
    let mut bad = tok[..at].to_vec();
    bad.extend_from_slice(b"\xff\xff\xff");
    bad.extend_from_slice(&tok[at..]);
    std::fs::write(dir.join("tokenizer.json"), bad).unwrap();
    let e = Tokenizer::from_dir(&dir).unwrap_err().to_string();
    assert!(e.contains("tokenizer.json") && !e.contains('\n'), "{e}");
}
