//! The tokenizer built from GGUF metadata: SmolLM2-135M-Instruct's real GGUF (byte-level BPE,
//! `smollm` pre-tokenizer), plus synthetic metadata for the SentencePiece path and errors.

mod common;

use std::collections::HashMap;

use common::{golden, ids, render_case, smollm_gguf};
use famlx_text::{read_gguf_metadata, MetaValue, Tokenizer};

fn smollm() -> Tokenizer {
    let meta = read_gguf_metadata(&smollm_gguf()).unwrap();
    assert_eq!(meta.get("tokenizer.ggml.pre"), Some(&MetaValue::Str("smollm".into())));
    Tokenizer::from_gguf(&meta).unwrap()
}

#[test]
fn smollm2_ids_match_reference() {
    let tok = smollm();
    let g = golden("smollm2_gguf");
    for case in g["encode"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let want = ids(&case["ids"]);
        assert_eq!(tok.encode(text, false).unwrap(), want, "encode {text:?}");
        // add_bos_token is false in this GGUF, so add_bos changes nothing.
        assert_eq!(tok.encode(text, true).unwrap(), want, "encode {text:?} with add_bos");
        assert_eq!(tok.decode(&want, false).unwrap(), case["decoded"].as_str().unwrap());
    }
    assert_eq!(tok.vocab_size(), 49152);
    assert!(!tok.add_bos());
    assert_eq!(tok.bos_token(), Some(("<|im_start|>".to_string(), 1)));
    assert_eq!(tok.eos_ids()[0], 2);
    assert!(tok.eos_ids().contains(&0), "<|endoftext|> ends text too");
}

#[test]
fn smollm2_round_trips_and_specials() {
    let tok = smollm();
    for s in [
        "Hello, World!",
        "naïve café — 你好世界 🎉👍🏽 Ελληνικά",
        "0123456789 3.14159 -42",
        " \t\n  multiple   spaces\n\n\r\n trailing ",
        "<|im_start|>user\nHi<|im_end|>\n",
    ] {
        let enc = tok.encode(s, false).unwrap();
        assert_eq!(tok.decode(&enc, false).unwrap(), s, "round trip {s:?} via {enc:?}");
    }
    assert_eq!(tok.encode("<|im_start|>", false).unwrap(), vec![1]);
    assert_eq!(tok.token_to_id("<|im_end|>"), Some(2));
    // Digits are split one by one (the `smollm` pre-tokenizer).
    let digits = tok.encode("2024", false).unwrap();
    assert_eq!(digits.len(), 4);
    assert_eq!(tok.decode(&tok.encode("<|im_start|>hi", false).unwrap(), true).unwrap(), "hi");
}

#[test]
fn smollm2_chat_template_renders_chatml() {
    let tok = smollm();
    let g = golden("smollm2_gguf");
    assert_eq!(tok.chat_template(), g["chat_template"].as_str());
    let tmpl = tok.compiled_chat_template().unwrap().unwrap();
    for case in g["templates"].as_array().unwrap() {
        let got = render_case(&tmpl, case).unwrap();
        assert_eq!(got, case["expected"].as_str().unwrap(), "{}", case["name"]);
        assert_eq!(tok.encode(&got, true).unwrap(), ids(&case["ids"]), "{}", case["name"]);
    }
    let one = tmpl
        .render(
            &[serde_json::json!({"role": "user", "content": "What is the capital of France?"})],
            None,
            true,
            &Default::default(),
        )
        .unwrap();
    assert_eq!(
        one,
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
         <|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    );
}

fn strs(v: &[&str]) -> MetaValue {
    MetaValue::Strs(v.iter().map(|s| s.to_string()).collect())
}

/// A tiny SentencePiece (`llama`) vocabulary: specials, 256 byte tokens, scored pieces.
fn spm_meta() -> HashMap<String, MetaValue> {
    let mut tokens = vec!["<unk>".to_string(), "<s>".to_string(), "</s>".to_string()];
    let mut types = vec![2, 3, 3];
    let mut scores = vec![0.0, 0.0, 0.0];
    for b in 0..256 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
        scores.push(0.0);
    }
    for (p, s) in [
        ("▁hello", -1.0),
        ("▁he", -3.0),
        ("llo", -4.0),
        ("ll", -5.0),
        ("▁h", -6.0),
        ("he", -7.0),
        ("▁", -10.0),
        ("h", -11.0),
        ("e", -12.0),
        ("l", -13.0),
        ("o", -14.0),
    ] {
        tokens.push(p.to_string());
        types.push(1);
        scores.push(s);
    }
    let mut m = HashMap::new();
    m.insert("tokenizer.ggml.model".into(), MetaValue::Str("llama".into()));
    m.insert("tokenizer.ggml.tokens".into(), MetaValue::Strs(tokens));
    m.insert("tokenizer.ggml.token_type".into(), MetaValue::Ints(types));
    m.insert("tokenizer.ggml.scores".into(), MetaValue::Floats(scores));
    m.insert("tokenizer.ggml.bos_token_id".into(), MetaValue::Ints(vec![1]));
    m.insert("tokenizer.ggml.eos_token_id".into(), MetaValue::Ints(vec![2]));
    m.insert("tokenizer.ggml.unknown_token_id".into(), MetaValue::Ints(vec![0]));
    m
}

#[test]
fn sentencepiece_vocab_merges_by_score_and_falls_back_to_bytes() {
    let tok = Tokenizer::from_gguf(&spm_meta()).unwrap();
    let hello = tok.token_to_id("▁hello").unwrap();
    assert_eq!(tok.encode("hello", false).unwrap(), vec![hello]);
    assert!(tok.add_bos(), "SentencePiece vocabularies add BOS by default");
    assert_eq!(tok.encode("hello", true).unwrap(), vec![1, hello]);
    assert_eq!(tok.encode("<s>hello", true).unwrap(), vec![1, hello], "no double BOS");
    // 'ü' is not a piece: its UTF-8 bytes 0xC3 0xBC become byte tokens (ids 3 + byte).
    let space = tok.token_to_id("▁").unwrap();
    assert_eq!(tok.encode("ü", false).unwrap(), vec![space, 3 + 0xC3, 3 + 0xBC]);
    let enc = tok.encode("hello ü hello", false).unwrap();
    assert_eq!(tok.decode(&enc, false).unwrap(), "hello ü hello");
    assert_eq!(tok.eos_ids(), vec![2]);
}

#[test]
fn unsupported_gguf_tokenizers_are_refused_naming_the_field() {
    let mut m = spm_meta();
    m.insert("tokenizer.ggml.model".into(), MetaValue::Str("bert".into()));
    let e = Tokenizer::from_gguf(&m).unwrap_err().to_string();
    assert!(e.contains("tokenizer.ggml.model") && e.contains("bert"), "{e}");

    let mut m = HashMap::new();
    m.insert("tokenizer.ggml.model".to_string(), MetaValue::Str("gpt2".into()));
    m.insert("tokenizer.ggml.pre".to_string(), MetaValue::Str("mystery-pre".into()));
    m.insert("tokenizer.ggml.tokens".to_string(), strs(&["a", "b", "ab"]));
    m.insert("tokenizer.ggml.merges".to_string(), strs(&["a b"]));
    let e = Tokenizer::from_gguf(&m).unwrap_err().to_string();
    assert!(e.contains("tokenizer.ggml.pre") && e.contains("mystery-pre"), "{e}");

    m.insert("tokenizer.ggml.pre".to_string(), MetaValue::Str("qwen2".into()));
    m.insert("tokenizer.ggml.merges".to_string(), strs(&["ab"]));
    let e = Tokenizer::from_gguf(&m).unwrap_err().to_string();
    assert!(e.contains("tokenizer.ggml.merges[0]"), "{e}");

    m.remove("tokenizer.ggml.model");
    let e = Tokenizer::from_gguf(&m).unwrap_err().to_string();
    assert!(e.contains("tokenizer.ggml.model") && e.contains("missing"), "{e}");
}

#[test]
fn gpt2_pre_tokenizer_variants_build() {
    // A byte-level vocab over "ab 12": each pre-tokenizer name must build and round-trip.
    let tokens = ["a", "b", "Ġ", "1", "2", "ab", "Ġa", "12", "<|eot_id|>"];
    for pre in ["gpt2", "default", "llama-bpe", "qwen2", "smollm"] {
        let mut m = HashMap::new();
        m.insert("tokenizer.ggml.model".to_string(), MetaValue::Str("gpt2".into()));
        m.insert("tokenizer.ggml.pre".to_string(), MetaValue::Str(pre.into()));
        m.insert("tokenizer.ggml.tokens".to_string(), strs(&tokens));
        m.insert("tokenizer.ggml.token_type".to_string(), MetaValue::Ints(vec![1, 1, 1, 1, 1, 1, 1, 1, 3]));
        m.insert("tokenizer.ggml.merges".to_string(), strs(&["a b", "Ġ a", "1 2"]));
        m.insert("tokenizer.ggml.eos_token_id".to_string(), MetaValue::Ints(vec![8]));
        let tok = Tokenizer::from_gguf(&m).unwrap_or_else(|e| panic!("{pre}: {e}"));
        let enc = tok.encode("ab a12<|eot_id|>", false).unwrap();
        assert_eq!(tok.decode(&enc, false).unwrap(), "ab a12<|eot_id|>", "{pre}");
        assert_eq!(*enc.last().unwrap(), 8, "{pre}: special token is one id");
        assert_eq!(&enc[..2], &[5, 6], "{pre}: 'ab' then 'Ġa'");
        // Digits: smollm/qwen2 split them one by one, gpt2/llama-bpe keep "12" whole.
        let twelve = if matches!(pre, "smollm" | "qwen2") { vec![3, 4] } else { vec![7] };
        assert_eq!(&enc[2..enc.len() - 1], twelve.as_slice(), "{pre}");
        assert!(!tok.add_bos(), "{pre}: no BOS id, so no BOS");
    }
}

#[test]
fn gguf_metadata_reader_rejects_non_gguf_naming_the_file() {
    let dir = common::temp_dir("gguf");
    let p = dir.join("junk.gguf");
    std::fs::write(&p, b"GGUF\x03\x00\x00\x00\x00").unwrap();
    let e = read_gguf_metadata(&p).unwrap_err().to_string();
    assert!(e.contains("junk.gguf") && e.contains("truncated"), "{e}");
    std::fs::write(&p, b"not a gguf at all").unwrap();
    let e = read_gguf_metadata(&p).unwrap_err().to_string();
    assert!(e.contains("junk.gguf") && e.contains("not a GGUF"), "{e}");
    let e = Tokenizer::from_gguf_file(&dir.join("absent.gguf")).unwrap_err().to_string();
    assert!(e.contains("absent.gguf"), "{e}");
}
