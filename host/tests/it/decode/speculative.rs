//! The host's speculative loop with a separate draft model (the generic
//! small-LM drafter every llama/qwen3 checkpoint provides): greedy output
//! with a drafter equals greedy output without one, token for token, at
//! several depths; rollback through trimming (dense caches) and through
//! snapshot + refeed (a rotating window that has slid); the sampled path
//! with a one-hot distribution; prompt reuse across turns; and bad flags.

use crate::common;

use common::{fixture, mlx_lock};
use famlx::cache::CacheOptions;
use famlx::decode::{Drafter, GenParams, GenStats, SpecParams};
use famlx::model::LoadedModel;
use famlx::sample::SamplerParams;
use famlx::session::Session;

fn registry() -> famlx::plugins::Registry {
    famlx::plugins::Registry::discover(&famlx::plugins::search_dirs(&[]))
}

fn load_model(variant: &str, opts: CacheOptions) -> LoadedModel {
    LoadedModel::load(&fixture(variant), &registry(), None, opts).unwrap_or_else(|e| panic!("{variant}: {e:#}"))
}

fn load(variant: &str, opts: CacheOptions) -> Session {
    Session::new(load_model(variant, opts)).unwrap()
}

fn with_drafter(mut s: Session, draft: &str, depth: usize) -> Session {
    let d = Drafter::load(&fixture(draft), &registry(), None, &s.model).unwrap_or_else(|e| panic!("{draft}: {e:#}"));
    s.drafter = Some(d);
    s.spec = SpecParams { depth, min_confidence: 0.0 };
    s
}

fn params(max_tokens: usize) -> GenParams {
    GenParams { max_tokens, prefill_step: 16, stop_ids: Vec::new(), ..Default::default() }
}

fn run(s: &mut Session, prompt: &[u32], p: &GenParams) -> GenStats {
    s.reset().unwrap();
    s.run(prompt, p, |_| true).unwrap_or_else(|e| panic!("generate: {e:#}"))
}

const PROMPT: [u32; 21] = [1, 17, 52, 300, 11, 9, 250, 77, 101, 402, 5, 60, 61, 62, 200, 201, 33, 34, 35, 36, 37];

/// Greedy with a (different) draft model equals plain greedy at depths 1-4,
/// and the drafter both hits and misses.
#[test]
fn greedy_output_unchanged_by_draft_model() {
    let _g = mlx_lock();
    let p = params(24);
    let mut plain = load("llama-tied-f32", CacheOptions::default());
    let want = run(&mut plain, &PROMPT, &p);
    assert!(want.draft.is_none());
    for depth in 1..=4 {
        let mut m = with_drafter(load("llama-tied-f32", CacheOptions::default()), "llama-bf16", depth);
        let got = run(&mut m, &PROMPT, &p);
        assert_eq!(got.tokens, want.tokens, "depth {depth}");
        let d = got.draft.expect("draft stats");
        assert!(d.proposed > 0 && d.rounds > 0, "depth {depth}: {d:?}");
        assert!(d.accepted < d.proposed, "depth {depth}: an unrelated draft model should miss sometimes: {d:?}");
        // The caches hold the prompt and every generated token but the last.
        assert_eq!(m.seq.cache_offset() as usize, PROMPT.len() + got.tokens.len() - 1, "depth {depth}");
    }
}

/// The target drafting for itself is accepted (almost) always: one verify
/// step yields several tokens.
#[test]
fn self_draft_is_accepted() {
    let _g = mlx_lock();
    let p = params(20);
    let mut plain = load("llama-tied-f32", CacheOptions::default());
    let want = run(&mut plain, &PROMPT, &p);
    let mut m = with_drafter(load("llama-tied-f32", CacheOptions::default()), "llama-tied-f32", 3);
    let got = run(&mut m, &PROMPT, &p);
    assert_eq!(got.tokens, want.tokens);
    let d = got.draft.unwrap();
    // It reads the prompt's first token in `begin`, so it sees what the
    // target sees: (almost) every draft is accepted.
    assert!(d.accepted * 10 >= d.proposed * 9, "{d:?}");
    assert!(d.rounds < want.tokens.len() / 2, "{d:?}");
}

/// A rotating window that slides during generation cannot be trimmed:
/// rollback restores the snapshot and feeds the accepted tokens again.
#[test]
fn rollback_through_snapshot_on_a_slid_window() {
    let _g = mlx_lock();
    let opts = CacheOptions { max_kv_size: Some(24), ..Default::default() };
    let p = params(20);
    let mut plain = load("llama-tied-f32", opts.clone());
    let want = run(&mut plain, &PROMPT, &p);
    for depth in [1, 3] {
        let mut m = with_drafter(load("llama-tied-f32", opts.clone()), "qwen3-bf16", depth);
        let got = run(&mut m, &PROMPT, &p);
        assert_eq!(got.tokens, want.tokens, "depth {depth}");
        assert!(got.draft.unwrap().accepted < got.draft.unwrap().proposed);
    }
}

/// Temperature with top-k 1 is deterministic, so the rejection-sampling
/// path must reproduce greedy output exactly.
#[test]
fn rejection_sampling_with_one_hot_target() {
    let _g = mlx_lock();
    let mut p = params(16);
    let want = run(&mut load("llama-tied-f32", CacheOptions::default()), &PROMPT, &p);
    p.sampler = SamplerParams { temperature: 0.8, top_k: 1, ..Default::default() };
    let mut m = with_drafter(load("llama-tied-f32", CacheOptions::default()), "llama-bf16", 3);
    mlx::random::seed(7).unwrap();
    let got = run(&mut m, &PROMPT, &p);
    assert_eq!(got.tokens, want.tokens);
}

/// Stop tokens and max_tokens end generation inside a round, and the
/// caches are left holding exactly what was emitted but the last token.
#[test]
fn stops_inside_a_round() {
    let _g = mlx_lock();
    let full = run(&mut load("llama-tied-f32", CacheOptions::default()), &PROMPT, &params(20));
    let stop = full.tokens[7];
    let first_stop = full.tokens.iter().position(|&t| t == stop).unwrap();
    let mut m = with_drafter(load("llama-tied-f32", CacheOptions::default()), "llama-tied-f32", 4);
    let mut p = params(20);
    p.stop_ids = vec![stop];
    let got = run(&mut m, &PROMPT, &p);
    assert_eq!(got.tokens, full.tokens[..=first_stop].to_vec());
    assert_eq!(m.seq.cache_offset() as usize, PROMPT.len() + got.tokens.len() - 1);
    for n in [1, 2, 5, 6] {
        let got = run(&mut m, &PROMPT, &params(n));
        assert_eq!(got.tokens, full.tokens[..n].to_vec(), "max_tokens {n}");
        assert_eq!(m.seq.cache_offset() as usize, PROMPT.len() + n - 1, "max_tokens {n}");
    }
}

/// Chat-style prompt reuse with a drafter: turn 2 gives what a fresh run gives.
#[test]
fn prompt_reuse_with_drafter() {
    let _g = mlx_lock();
    let p = params(10);
    let mut m = with_drafter(load("llama-tied-f32", CacheOptions::default()), "llama-bf16", 2);
    let (t1, _) = m.generate(&PROMPT, &p, |_| true).unwrap();
    let mut turn2: Vec<u32> = PROMPT.to_vec();
    turn2.extend(&t1.tokens);
    turn2.extend([40, 41, 42]);
    let (t2, prefilled) = m.generate(&turn2, &p, |_| true).unwrap();
    assert_eq!(prefilled, 3 + 1, "only the new suffix (and the last reply token) is prefilled");
    let fresh = run(&mut load("llama-tied-f32", CacheOptions::default()), &turn2, &p);
    assert_eq!(t2.tokens, fresh.tokens);
}

/// A checkpoint of a family without a self-drafter gives none; bad depths
/// and a missing draft folder are clear errors.
#[test]
fn drafter_errors() {
    let _g = mlx_lock();
    let m = load_model("llama-bf16", CacheOptions::default());
    assert!(Drafter::from_target(&m).unwrap().is_none());
    let e = Drafter::load(&fixture("no-such-draft"), &registry(), None, &m).err().unwrap();
    assert!(format!("{e:#}").contains("no-such-draft"), "{e:#}");
    for bad in [0, 9] {
        let e = SpecParams { depth: bad, min_confidence: 0.0 }.validate().unwrap_err();
        assert!(e.to_string().contains("--mtp-depth"), "{e}");
    }
}

/// The confidence gate cuts drafts short (fewer tokens proposed per verify
/// step) without changing the output.
#[test]
fn confidence_gate_shortens_drafts() {
    let _g = mlx_lock();
    let p = params(16);
    let want = run(&mut load("llama-tied-f32", CacheOptions::default()), &PROMPT, &p);
    let mut m = with_drafter(load("llama-tied-f32", CacheOptions::default()), "llama-bf16", 4);
    let open = run(&mut m, &PROMPT, &p).draft.unwrap();
    m.spec.min_confidence = 0.999;
    let got = run(&mut m, &PROMPT, &p);
    assert_eq!(got.tokens, want.tokens);
    let gated = got.draft.unwrap();
    assert!(gated.proposed * open.rounds < open.proposed * gated.rounds, "gated {gated:?} vs open {open:?}");
}

/// Rejection sampling keeps the target's distribution: the joint law of the
/// first two sampled tokens (the second one drafted by an unrelated model
/// and accepted or resampled) matches plain sampling's. Low temperature and
/// top-k 3 concentrate it on a few cells so 300 draws per side resolve it;
/// accepting drafts blindly would follow the draft model's law instead.
#[test]
fn rejection_sampling_keeps_the_target_distribution() {
    use std::collections::HashMap;
    let _g = mlx_lock();
    let mut p = params(2);
    p.sampler = SamplerParams { temperature: 0.7, top_k: 3, ..Default::default() };
    let n = 300;
    let draw = |m: &mut Session, seed0: u64| -> HashMap<(u32, u32), f64> {
        let mut h = HashMap::new();
        for i in 0..n {
            mlx::random::seed(seed0 + i).unwrap();
            let t = run(m, &PROMPT[..6], &p).tokens;
            *h.entry((t[0], t[1])).or_insert(0.0) += 1.0 / n as f64;
        }
        h
    };
    let plain = draw(&mut load("llama-tied-f32", CacheOptions::default()), 1000);
    let mut spec_m = with_drafter(load("llama-tied-f32", CacheOptions::default()), "llama-bf16", 1);
    let spec = draw(&mut spec_m, 5000);
    // The draft model alone, as the law blind acceptance would give.
    let mut draft_only = load("llama-bf16", CacheOptions::default());
    let blind = draw(&mut draft_only, 9000);
    let tv = |a: &HashMap<(u32, u32), f64>, b: &HashMap<(u32, u32), f64>| -> f64 {
        let keys: std::collections::HashSet<_> = a.keys().chain(b.keys()).collect();
        keys.iter().map(|k| (a.get(k).unwrap_or(&0.0) - b.get(k).unwrap_or(&0.0)).abs()).sum::<f64>() / 2.0
    };
    let (d_spec, d_blind) = (tv(&plain, &spec), tv(&plain, &blind));
    eprintln!("total variation: speculative vs plain {d_spec:.3}, draft model vs plain {d_blind:.3}");
    assert!(d_blind > 0.3, "the draft model should sample differently from the target ({d_blind:.3}); test is blind");
    assert!(d_spec < 0.15, "speculative sampling drifts from the target's distribution: TV {d_spec:.3}");
}

/// A draft checkpoint whose embedding table is padded past the shared
/// tokenizer (as Qwen2.5 0.5B's is against 7B's) drafts for the target;
/// one with another vocabulary and no matching tokenizer is refused.
#[test]
fn padded_vocabulary_draft_model() {
    let _g = mlx_lock();
    let dir = common::fixture_copy("llama-tied-f32");
    let st = dir.path().join("model.safetensors");
    let (mut t, _) = mlx::io::load_safetensors(&st).unwrap();
    let name = "model.embed_tokens.weight";
    let e = t.remove(name).unwrap();
    let extra = mlx::zeros(&[8, e.dim(1)], e.dtype()).unwrap();
    t.insert(name.to_string(), mlx::concatenate(&[&e, &extra], 0).unwrap());
    let refs: Vec<(&str, &mlx::Array)> = t.iter().map(|(k, v)| (k.as_str(), v)).collect();
    mlx::io::save_safetensors(&st, &refs, &[("format", "mlx")]).unwrap();
    let cfg = dir.path().join("config.json");
    let mut c: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&cfg).unwrap()).unwrap();
    c["vocab_size"] = 520.into();
    std::fs::write(&cfg, c.to_string()).unwrap();

    let p = params(16);
    let want = run(&mut load("llama-tied-f32", CacheOptions::default()), &PROMPT, &p);
    let mut m = load("llama-tied-f32", CacheOptions::default());
    m.drafter = Some(Drafter::load(dir.path(), &registry(), None, &m.model).unwrap_or_else(|e| panic!("{e:#}")));
    m.spec = SpecParams { depth: 3, min_confidence: 0.0 };
    let got = run(&mut m, &PROMPT, &p);
    assert_eq!(got.tokens, want.tokens);
    let d = got.draft.unwrap();
    assert!(d.accepted * 10 >= d.proposed * 9, "the padded copy drafts like the original: {d:?}");

    // Without the tokenizer the sizes alone decide: refused, naming both.
    std::fs::remove_file(dir.path().join("tokenizer.json")).unwrap();
    let e = Drafter::load(dir.path(), &registry(), None, &m.model).err().unwrap();
    assert!(format!("{e:#}").contains("520") && format!("{e:#}").contains("512"), "{e:#}");
}
