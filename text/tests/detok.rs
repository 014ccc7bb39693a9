//! Streaming detokenization agrees with whole decoding and never emits broken characters.

mod common;

use common::{npm_tokenizer, smollm_gguf};
use famlx_text::{read_gguf_metadata, Tokenizer};

const TEXT: &str = "Emoji 🎉👍🏽🦩 and CJK 你好世界, 日本語のテキスト; café — naïve Ελληνικά 🇫🇷\n  end.";

fn tokenizers() -> Vec<(&'static str, Tokenizer)> {
    let meta = read_gguf_metadata(&smollm_gguf()).unwrap();
    vec![
        ("qwen3", Tokenizer::from_dir(&npm_tokenizer("qwen3")).unwrap()),
        ("gemma3", Tokenizer::from_dir(&npm_tokenizer("gemma3")).unwrap()),
        ("llama3_1", Tokenizer::from_dir(&npm_tokenizer("llama3_1")).unwrap()),
        ("smollm2-gguf", Tokenizer::from_gguf(&meta).unwrap()),
    ]
}

/// Streams `ids`; returns the chunks (the last one from `finish`).
fn stream(tok: &Tokenizer, ids: &[u32], skip_special: bool) -> Vec<String> {
    let mut d = tok.detokenizer_with(skip_special);
    let mut chunks: Vec<String> = ids.iter().map(|&id| d.push(id)).collect();
    chunks.push(d.finish());
    chunks
}

#[test]
fn streaming_equals_whole_decode_without_broken_characters() {
    for (name, tok) in tokenizers() {
        let ids = tok.encode(TEXT, false).unwrap();
        let chunks = stream(&tok, &ids, true);
        for c in &chunks {
            assert!(!c.contains('\u{FFFD}'), "{name}: chunk {c:?} holds a broken character");
        }
        assert_eq!(chunks.concat(), tok.decode(&ids, true).unwrap(), "{name}");
        assert_eq!(chunks.concat(), TEXT, "{name}");
        // Some token completed no character on its own and was held back.
        assert!(chunks[..ids.len()].iter().any(String::is_empty), "{name}: nothing was held back");

        // With special tokens kept, and with BOS at the start (SentencePiece space rules).
        let wrapped = format!("{}<|im_start|>x {TEXT}", tok.bos_token().map(|b| b.0).unwrap_or_default());
        let ids = tok.encode(&wrapped, true).unwrap();
        assert_eq!(stream(&tok, &ids, false).concat(), tok.decode(&ids, false).unwrap(), "{name} specials kept");
        assert_eq!(stream(&tok, &ids, true).concat(), tok.decode(&ids, true).unwrap(), "{name} specials skipped");
        assert_eq!(
            tok.detokenizer().push(ids[0]),
            tok.decode(&ids[..1], true).unwrap(),
            "{name}: default skips specials"
        );
    }
}

#[test]
fn incomplete_character_is_held_until_finish() {
    for (name, tok) in tokenizers() {
        // A character the vocabulary spells with several byte tokens.
        let (ch, ids) = ["🦩", "𝒳", "🫠", "𓀀", "🥨"]
            .iter()
            .map(|c| (*c, tok.encode(c, false).unwrap()))
            .find(|(_, ids)| ids.len() >= 2 && tok.decode(&ids[..1], false).unwrap().ends_with('\u{FFFD}'))
            .unwrap_or_else(|| panic!("{name}: no multi-token character found"));
        let mut d = tok.detokenizer();
        for &id in &ids[..ids.len() - 1] {
            assert_eq!(d.push(id), "", "{name}: partial {ch} must be held back");
        }
        assert_eq!(d.push(*ids.last().unwrap()), ch, "{name}");
        assert_eq!(d.finish(), "");
        // Cut off mid-character: finish flushes what is there (as U+FFFD).
        for &id in &ids[..ids.len() - 1] {
            assert_eq!(d.push(id), "");
        }
        let rest = d.finish();
        assert!(rest.ends_with('\u{FFFD}'), "{name}: {rest:?}");
    }
}
