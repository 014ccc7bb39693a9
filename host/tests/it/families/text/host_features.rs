//! What the host does for every text family with no code of the family's:
//! quantized KV caches give the tokens mlx-lm recorded with them, a window
//! (`--max-kv-size`) wider than the sequence changes nothing, the family's
//! own checkpoint as `--draft-model` keeps greedy tokens, and tensor and
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
