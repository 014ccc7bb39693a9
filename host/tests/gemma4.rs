//! gemma4 family: parity with mlx-lm on the gemma4 fixtures
//! (fixtures/make_gemma4_fixtures.py) and Gemma's one-BOS rule.
//!
//! Per fixture and prompt (1, 10 and 40 tokens; the sliding window is 8 and
//! the prefill chunk 16, so the 40-token prompt slides the window both in one
//! chunk and across chunks): first-step logits from one full forward on fresh
//! caches, and 24 greedy tokens with chunked prefill of 16, checked with the
//! tolerances and the tie rule of tests/parity.rs (common::parity).
//!
//! Fixtures: `gemma4-hf-bf16` (multimodal `gemma4` checkpoint in Hugging Face
//! naming, with vision tensors the plugin drops), `gemma4-bf16` and
//! `gemma4-q4` (the same weights converted by mlx-lm), `gemma4-e2b-bf16`
//! (`gemma4_text`, per-layer inputs, two KV-shared layers, double-wide MLP).
//! mlx-lm cannot quantize gemma4's sliding caches, so there is no `--kv-bits`
//! reference.

mod common;

use common::parity::{check_prompts, check_tokenizer};
use common::{expected, fixture, ids, mlx_lock, registry};
use famlx::cache::CacheOptions;
use famlx::model::LoadedModel;
use famlx::prompt::{chat_ids, Message};
use plugin_api::CacheKind;

fn load(variant: &str) -> LoadedModel {
    let reg = registry();
    LoadedModel::load(&fixture(variant), &reg, None, CacheOptions::default())
        .unwrap_or_else(|e| panic!("{variant}: load: {e:#}"))
}

/// The plan's caches match what mlx-lm's `make_cache` gives (recorded in
/// expected.json): rotating caches of the window for sliding layers, full
/// caches for global ones, none for KV-shared layers.
fn check_plan(variant: &str, m: &LoadedModel, exp: &serde_json::Value) {
    let want: Vec<CacheKind> = exp["make_cache"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| match c["kind"].as_str().unwrap() {
            "KVCache" => CacheKind::Full,
            "RotatingKVCache" => {
                assert_eq!(c["keep"].as_u64(), Some(0), "{variant}: keep");
                CacheKind::Sliding { window: c["max_size"].as_u64().unwrap() as u32 }
            }
            k => panic!("{variant}: cache kind {k}"),
        })
        .collect();
    assert_eq!(m.plan.caches.to_vec(), want, "{variant}: cache plan");
    assert_eq!(m.plan.add_bos.into_option(), Some(true));
}

fn parity(variant: &str) {
    let _g = mlx_lock();
    let exp = expected(variant);
    assert_eq!(exp["variant"].as_str(), Some(variant));
    assert_eq!(exp["prefill_step_size"].as_u64(), Some(16));
    let mut m = load(variant);
    assert_eq!(m.family.name, "gemma4", "{variant}: wrong family");
    check_plan(variant, &m, &exp);
    // No vision/audio tensors survive the rewriter.
    assert!(
        m.weights.tensors.keys().all(|k| !k.contains("vision") && !k.contains("audio")),
        "{variant}: media tensors kept"
    );

    let mut errs = check_prompts(variant, &mut m, &exp, false);
    errs.extend(check_tokenizer(variant, &m, &exp));
    assert!(errs.is_empty(), "{variant}: {} mismatches:\n{}", errs.len(), errs.join("\n"));
}

#[test]
fn gemma4_hf_bf16() {
    parity("gemma4-hf-bf16");
}
#[test]
fn gemma4_bf16() {
    parity("gemma4-bf16");
}
#[test]
fn gemma4_q4() {
    parity("gemma4-q4");
}
#[test]
fn gemma4_e2b_bf16() {
    parity("gemma4-e2b-bf16");
}

/// Raw and templated prompts both start with exactly one BOS.
#[test]
fn one_bos() {
    let _g = mlx_lock();
    for variant in ["gemma4-bf16", "gemma4-e2b-bf16"] {
        let m = load(variant);
        let tok = m.tokenizer().unwrap();
        let (bos_text, bos) = tok.bos_token().expect("gemma4 fixtures have a BOS");
        assert!(tok.add_bos(), "{variant}: add_bos");
        let one = |what: &str, ids: &[u32]| {
            assert_eq!(ids.first(), Some(&bos), "{variant}: {what}: {ids:?}");
            assert_ne!(ids.get(1), Some(&bos), "{variant}: {what}: two BOS: {ids:?}");
            assert_eq!(ids.iter().filter(|&&i| i == bos).count(), 1, "{variant}: {what}: {ids:?}");
        };
        one("raw", &tok.encode("The river ran past the old mill.", true).unwrap());
        one("raw starting with BOS text", &tok.encode(&format!("{bos_text}The river"), true).unwrap());
        let msgs = [Message::new("user", "What is the capital of France?")];
        let templ = chat_ids(tok, &msgs, &Default::default()).unwrap();
        one("templated", &templ);
        // The template itself writes `{{ bos_token }}`: the ids are those of
        // the rendered text without a second BOS.
        let exp = expected(variant);
        assert_eq!(templ, ids(&exp["tokenizer"]["chat"]["ids"]), "{variant}: chat ids");
    }
}

/// The plugin refuses what it cannot run yet, naming it.
#[test]
fn moe_is_refused_with_a_reason() {
    let _g = mlx_lock();
    let s = common::fixture_copy("gemma4-bf16");
    let cfg_path = s.path().join("config.json");
    let mut cfg: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&cfg_path).unwrap()).unwrap();
    cfg["text_config"]["enable_moe_block"] = serde_json::Value::Bool(true);
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
    let reg = registry();
    let err =
        LoadedModel::load(s.path(), &reg, None, CacheOptions::default()).err().expect("MoE config must be refused");
    assert!(format!("{err:#}").contains("enable_moe_block"), "{err:#}");
}
