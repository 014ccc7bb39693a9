//! Prompt reuse across chat turns: turn 2 prefills only what follows the
//! cached prefix and produces exactly the tokens of a full re-prefill.

use crate::common;

use famlx::cache::CacheOptions;
use famlx::decode::{generate, GenParams};
use famlx::model::LoadedModel;
use famlx::plugins::{search_dirs, Registry};
use famlx::prompt::{chat_ids, Message};
use famlx::session::Session;

fn params() -> GenParams {
    GenParams { max_tokens: 12, prefill_step: 16, ..Default::default() }
}

#[test]
fn second_turn_prefills_only_the_new_suffix() {
    let _g = common::mlx_lock();
    let reg = Registry::discover(&search_dirs(&[]));
    for name in ["llama-bf16", "qwen3-q4"] {
        let path = common::fixture(name);
        let mut cache = Session::new(LoadedModel::load(&path, &reg, None, CacheOptions::default()).unwrap()).unwrap();
        let tok = cache.model.tokenizer().unwrap().clone();
        let extra = serde_json::Map::new();
        let mut history = vec![Message::new("user", "hello there, how are you today?")];

        let ids1 = chat_ids(&tok, &history, &extra).unwrap();
        let (s1, pre1) = cache.generate(&ids1, &params(), |_| true).unwrap();
        assert_eq!(pre1, ids1.len(), "{name}: first turn prefills everything");
        let answer = tok.decode(&s1.tokens, true).unwrap();
        history.push(Message::new("assistant", &answer));
        history.push(Message::new("user", "and what about tomorrow?"));

        let ids2 = chat_ids(&tok, &history, &extra).unwrap();
        // What the caches hold after turn 1: the prompt and every generated
        // token but the last (which was never fed back).
        let mut cached = ids1.clone();
        cached.extend_from_slice(&s1.tokens[..s1.tokens.len() - 1]);
        assert_eq!(cache.seq.cache_offset(), cached.len() as i64, "{name}: cache holds prompt + fed tokens");
        let (s2, pre2) = cache.generate(&ids2, &params(), |_| true).unwrap();
        let common_prefix = cached.iter().zip(&ids2).take_while(|(a, b)| a == b).count();
        assert!(common_prefix >= ids1.len() - 1, "{name}: the template keeps turn 1 as a prefix");
        assert!(pre2 < ids2.len() - ids1.len() + 2, "{name}: turn 2 reused the cache ({pre2} of {})", ids2.len());
        assert_eq!(pre2, ids2.len() - common_prefix, "{name}: only the suffix after the common prefix is prefilled");

        // The same conversation from scratch.
        let m = &mut cache.model;
        let mut seq = m.sequence().unwrap();
        let full = generate(m, &mut seq, &ids2, &params(), |_| true).unwrap();
        assert_eq!(s2.tokens, full.tokens, "{name}: reuse must not change the answer");
    }
}

/// When turn 1 leaves caches that cannot rewind to the shared prefix — a
/// recurrent state that took the decode loop's queued step (generation
/// stopped on a stop token), or a window that slid — turn 2 goes back to
/// turn 1's checkpoint (its prompt) instead of prefilling everything, and
/// answers as a full re-prefill does.
#[test]
fn unrewindable_caches_fall_back_to_the_turn_checkpoint() {
    let _g = common::mlx_lock();
    let reg = Registry::discover(&search_dirs(&[]));
    let turn1: Vec<u32> = (0..30).map(|i| (i * 37 + 11) % 500).collect();
    for (name, opts) in [
        ("qwen3_5-bf16", CacheOptions::default()),
        ("llama-bf16", CacheOptions { max_kv_size: Some(24), ..Default::default() }),
    ] {
        let mut m = LoadedModel::load(&common::fixture(name), &reg, None, opts.clone()).unwrap();
        let mut seq = m.sequence().unwrap();
        let plain = generate(&mut m, &mut seq, &turn1, &params(), |_| true).unwrap().tokens;
        // Stop on the third token: the loop had already queued the next step.
        let p = GenParams { stop_ids: vec![plain[2]], ..params() };
        let mut cache = Session::new(m).unwrap();
        let (s1, _) = cache.generate(&turn1, &p, |_| true).unwrap();
        assert_eq!(s1.tokens, plain[..3].to_vec(), "{name}");
        assert!(cache.rollback.is_some(), "{name}: a checkpoint was kept");
        let mut turn2 = turn1.clone();
        turn2.extend(&s1.tokens);
        turn2.extend([7, 8, 9, 10]);
        let (s2, pre2) = cache.generate(&turn2, &params(), |_| true).unwrap();
        assert_eq!(pre2, turn2.len() - turn1.len(), "{name}: turn 2 prefills from turn 1's checkpoint");
        if name.starts_with("qwen3_5") {
            // A window's content depends on chunk boundaries (as in mlx-lm),
            // so only the recurrent model must match a fresh run exactly.
            let m = &mut cache.model;
            let mut seq = m.sequence().unwrap();
            let fresh = generate(m, &mut seq, &turn2, &params(), |_| true).unwrap();
            assert_eq!(s2.tokens, fresh.tokens, "{name}: same reply as a full re-prefill");
        }
    }
}
