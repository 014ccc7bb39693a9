//! Prompt reuse across chat turns: turn 2 prefills only what follows the
//! cached prefix and produces exactly the tokens of a full re-prefill.

mod common;

use famlx::cache::CacheOptions;
use famlx::generate::{generate, GenParams};
use famlx::model::LoadedModel;
use famlx::plugins::{search_dirs, Registry};
use famlx::prompt::{chat_ids, Message};
use famlx::session::PromptCache;

fn params() -> GenParams {
    GenParams { max_tokens: 12, prefill_step: 16, ..Default::default() }
}

#[test]
fn second_turn_prefills_only_the_new_suffix() {
    let _g = common::mlx_lock();
    let reg = Registry::discover(&search_dirs(&[]));
    for name in ["llama-bf16", "qwen3-q4"] {
        let path = common::fixture(name);
        let mut m = LoadedModel::load(&path, &reg, None, CacheOptions::default()).unwrap();
        let tok = m.tokenizer().unwrap().clone();
        let extra = serde_json::Map::new();
        let mut history = vec![Message::new("user", "hello there, how are you today?")];
        let mut cache = PromptCache::default();

        let ids1 = chat_ids(&tok, &history, &extra).unwrap();
        let (s1, pre1) = cache.generate(&mut m, &ids1, &params(), |_| true).unwrap();
        assert_eq!(pre1, ids1.len(), "{name}: first turn prefills everything");
        let answer = tok.decode(&s1.tokens, true).unwrap();
        history.push(Message::new("assistant", &answer));
        history.push(Message::new("user", "and what about tomorrow?"));

        let ids2 = chat_ids(&tok, &history, &extra).unwrap();
        // What the caches hold after turn 1: the prompt and every generated
        // token but the last (which was never fed back).
        let mut cached = ids1.clone();
        cached.extend_from_slice(&s1.tokens[..s1.tokens.len() - 1]);
        assert_eq!(m.cache_offset(), cached.len() as i64, "{name}: cache holds prompt + fed tokens");
        let (s2, pre2) = cache.generate(&mut m, &ids2, &params(), |_| true).unwrap();
        let common_prefix = cached.iter().zip(&ids2).take_while(|(a, b)| a == b).count();
        assert!(common_prefix >= ids1.len() - 1, "{name}: the template keeps turn 1 as a prefix");
        assert!(pre2 < ids2.len() - ids1.len() + 2, "{name}: turn 2 reused the cache ({pre2} of {})", ids2.len());
        assert_eq!(pre2, ids2.len() - common_prefix, "{name}: only the suffix after the common prefix is prefilled");

        // The same conversation from scratch.
        m.reset_caches().unwrap();
        let full = generate(&mut m, &ids2, &params(), |_| true).unwrap();
        assert_eq!(s2.tokens, full.tokens, "{name}: reuse must not change the answer");
    }
}
