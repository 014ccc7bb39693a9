//! What the host does for every text family with no code of the family's:
//! quantized KV caches give the tokens mlx-lm recorded with them, a window
//! (`--max-kv-size`) wider than the sequence changes nothing, a second turn
//! reuses the first's cached prefix and answers as a fresh run, a hot
//! reload of the family rebuilds the same model, the family's own
//! checkpoint as `--draft-model` keeps greedy tokens, and tensor and
//! pipeline splits over 2 ranks give the tokens of one process.

use crate::common;

use common::parity::{check_greedy, floats};
use common::{expected, famlx, fixture, ids, json_of, mlx_lock, registry, texts};
use famlx::cache::CacheOptions;
use famlx::decode::{Drafter, GenParams, SpecParams};
use famlx::model::LoadedModel;
use famlx::session::Session;

/// The float32 fixture of each family.
fn families() -> Vec<&'static str> {
    super::FIXTURES.iter().copied().filter(|f| f.ends_with("-f32")).collect()
}

fn params() -> GenParams {
    GenParams { max_tokens: 24, prefill_step: 16, stop_ids: Vec::new(), ..Default::default() }
}

fn session(variant: &str, opts: CacheOptions) -> Session {
    let m =
        LoadedModel::load(&fixture(variant), &registry(), None, opts).unwrap_or_else(|e| panic!("{variant}: {e:#}"));
    Session::new(m).unwrap()
}

fn greedy(s: &mut Session, prompt: &[u32]) -> Vec<u32> {
    s.reset().unwrap();
    s.run(prompt, &params(), |_| true).unwrap_or_else(|e| panic!("generate: {e:#}")).tokens
}

#[test]
fn quantized_kv_caches_give_mlx_lms_tokens() {
    let _g = mlx_lock();
    let (mut checked, mut errs) = (0, Vec::new());
    for v in families() {
        let exp = expected(v);
        for bits in [8, 4] {
            let key = format!("greedy_kv{bits}");
            // Recorded where mlx-lm can quantize the model's caches (not
            // for sliding windows, fixtures/README.md).
            if exp["prompts"][0].get(&key).is_none() {
                continue;
            }
            let opts = CacheOptions { k_bits: Some(bits), v_bits: Some(bits), kv_group_size: 32, ..Default::default() };
            let mut s = session(v, opts);
            for p in exp["prompts"].as_array().unwrap() {
                let got = greedy(&mut s, &ids(&p["ids"]));
                let (want, margins) = (ids(&p[&key]), floats(&p[format!("{key}_margins")]));
                let what = format!("{v} kv{bits}");
                errs.extend(check_greedy(&what, p["name"].as_str().unwrap(), &got, &want, &margins).err());
            }
            checked += 1;
        }
    }
    assert!(errs.is_empty(), "{}", errs.join("\n"));
    assert!(checked >= 20, "only {checked} family/bits pairs have mlx-lm's quantized-cache tokens");
}

#[test]
fn a_window_wider_than_the_sequence_changes_nothing() {
    let _g = mlx_lock();
    for v in families() {
        let exp = expected(v);
        let p = &exp["prompts"][2];
        let prompt = ids(&p["ids"]);
        let opts = CacheOptions { max_kv_size: Some(prompt.len() + 30), ..Default::default() };
        let got = greedy(&mut session(v, opts), &prompt);
        assert_eq!(got, ids(&p["greedy"]), "{v}: --max-kv-size {}", prompt.len() + 30);
    }
}

/// Dynamic NTK rope (internlm3's fixture: a context of 32, prompts past it)
/// regrows its base per call from where the call ends, so keys cached by an
/// earlier call keep the base they were roped with: the answer depends on
/// how the sequence was cut into calls, in mlx-lm as here (its fixture's
/// numbers are for mlx-lm's cut, which `parity` follows).
const CUT_DEPENDENT: [&str; 1] = ["internlm3-f32"];

#[test]
fn a_second_turn_reuses_the_prefix_and_answers_as_a_fresh_run() {
    let _g = mlx_lock();
    for v in families().into_iter().filter(|v| !CUT_DEPENDENT.contains(v)) {
        let exp = expected(v);
        let long = ids(&exp["prompts"][2]["ids"]);
        let (first, second) = (&long[..20], &long[..]);
        let mut s = session(v, CacheOptions::default());
        let p = GenParams { max_tokens: 6, ..params() };
        let (_, pre1) = s.generate(first, &p, |_| true).unwrap_or_else(|e| panic!("{v}: {e:#}"));
        assert_eq!(pre1, first.len(), "{v}: turn 1 prefills everything");
        // Turn 2 extends turn 1's prompt (not its answer): the caches go
        // back to the shared prefix, or to turn 1's checkpoint.
        let (got, pre2) = s.generate(second, &p, |_| true).unwrap_or_else(|e| panic!("{v}: {e:#}"));
        assert!(pre2 < second.len(), "{v}: turn 2 prefilled all {pre2} tokens");
        let mut fresh = session(v, CacheOptions::default());
        let (want, _) = fresh.generate(second, &p, |_| true).unwrap();
        assert_eq!(got.tokens, want.tokens, "{v}: reuse changed the answer");
    }
}

#[test]
fn a_hot_reload_of_the_family_rebuilds_the_same_model() {
    let _g = mlx_lock();
    for v in families() {
        let exp = expected(v);
        let prompt = ids(&exp["prompts"][1]["ids"]);
        let mut s = session(v, CacheOptions::default());
        let before = greedy(&mut s, &prompt);
        // The checkpoint's tensors are still in memory (as under --watch):
        // the family's rewrite, fusions and build run again over them.
        let fam = s.model.family.clone();
        let same_caches = s.model.swap_family(fam).unwrap_or_else(|e| panic!("{v}: reload: {e:#}"));
        assert!(same_caches, "{v}: the same build asks for another cache layout");
        s.reset().unwrap();
        assert_eq!(greedy(&mut s, &prompt), before, "{v}: tokens after a reload");
    }
}

#[test]
fn drafting_with_its_own_checkpoint_keeps_greedy_tokens() {
    let _g = mlx_lock();
    for v in families() {
        let exp = expected(v);
        let p = &exp["prompts"][1];
        let mut s = session(v, CacheOptions::default());
        let d = Drafter::load(&fixture(v), &registry(), None, &s.model).unwrap_or_else(|e| panic!("{v}: {e:#}"));
        s.drafter = Some(d);
        s.spec = SpecParams { depth: 3, min_confidence: 0.0 };
        s.reset().unwrap();
        let stats = s.run(&ids(&p["ids"]), &params(), |_| true).unwrap_or_else(|e| panic!("{v}: {e:#}"));
        assert_eq!(stats.tokens, ids(&p["greedy"]), "{v}: drafting for itself");
        let d = stats.draft.unwrap_or_else(|| panic!("{v}: no draft stats"));
        assert!(d.accepted > 0, "{v}: a model drafting for itself had nothing accepted: {d:?}");
    }
}

/// Families whose fixture uses something a tensor split refuses, with the
/// words of the refusal (stablelm: per-head q/k LayerNorms).
const NO_TENSOR_SPLIT: [(&str, &str); 1] = [("stablelm-f32", "tensor-parallel")];

#[test]
fn splits_over_two_ranks_give_the_tokens_of_one_process() {
    let _one = common::distributed_lock();
    for v in families() {
        let model = fixture(v);
        let args = |extra: &[&str]| {
            let mut a: Vec<String> =
                ["generate", "--prompt-ids", "1,17,52,300,11,9,250,77,101,402", "-m", "8", "--json"]
                    .iter()
                    .map(|s| s.to_string())
                    .collect();
            a.extend(["--model".to_string(), model.display().to_string()]);
            a.extend(extra.iter().map(|s| s.to_string()));
            a
        };
        let alone = json_of(&famlx().args(args(&[])).output().unwrap());
        for mode in ["tensor", "pipeline"] {
            let o = famlx().args(["launch", "-n", "2", "--"]).args(args(&["--parallel", mode])).output().unwrap();
            if let Some((_, words)) = NO_TENSOR_SPLIT.iter().find(|(f, _)| *f == v && mode == "tensor") {
                let (_, err) = texts(&o);
                assert!(!o.status.success() && err.contains(words), "{v}: {mode}: {err}");
                continue;
            }
            let got = json_of(&o);
            assert_eq!(got["tokens"], alone["tokens"], "{v}: 2 ranks, {mode}");
        }
    }
}
