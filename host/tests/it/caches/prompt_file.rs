//! Prompt caches saved to disk and loaded back (`famlx cache-prompt`,
//! `generate --prompt-cache-file`): for every cache kind the loaded caches
//! continue exactly as the saved ones would have, a file for another model
//! is refused naming the file, and the CLI prefills only the new suffix.

use crate::common;

use famlx::cache::{self, CacheImpl, CacheOptions, RecurrentCache};
use famlx::decode::{prefill, prefill_last_alone, GenParams};
use famlx::model::LoadedModel;
use famlx::plugins::{search_dirs, Registry};
use famlx::session::Session;
use mlx::{Array, Dtype};
use std::collections::HashMap;
use std::path::Path;

fn load(name: &str, opts: CacheOptions) -> LoadedModel {
    let reg = Registry::discover(&search_dirs(&[]));
    LoadedModel::load(&common::fixture(name), &reg, None, opts).unwrap()
}

/// A deterministic prompt of `n` ids inside the fixtures' 512-token vocabulary.
fn ids(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32).map(|i| (i * 37 + seed * 11) % 500 + 1).collect()
}

fn params() -> GenParams {
    GenParams { max_tokens: 12, prefill_step: 8, ..Default::default() }
}

fn floats(a: &Array) -> Vec<f32> {
    a.astype(Dtype::F32).unwrap().to_vec().unwrap()
}

fn kv8() -> CacheOptions {
    CacheOptions { k_bits: Some(8), v_bits: Some(8), kv_group_size: 32, ..CacheOptions::default() }
}

fn rotating(quant: bool) -> CacheOptions {
    let base = if quant { kv8() } else { CacheOptions::default() };
    CacheOptions { max_kv_size: Some(24), ..base }
}

/// Prefills `prompt` into a fresh model, saves it, loads it into another
/// fresh model; both then continue with `suffix`: the logits of the suffix
/// and the greedy tokens after it must be identical.
fn round_trip(what: &str, kind: &str, opts: CacheOptions, prompt: &[u32], suffix: &[u32], dir: &Path) {
    let file = dir.join(format!("{what}.safetensors"));
    let mut a = load("llama-bf16", opts.clone());
    let mut qa = a.sequence().unwrap();
    prefill_last_alone(&mut a, &mut qa, prompt, 8).unwrap();
    qa.eval_caches().unwrap();
    qa.save_prompt_cache(&a, &file, prompt).unwrap();
    let (_, meta) = mlx::io::load_safetensors(&file).unwrap();
    assert!(meta["caches"].contains(&format!("\"kind\":\"{kind}\"")), "{what}: saved as {kind}: {}", meta["caches"]);

    let mut b = load("llama-bf16", opts);
    let mut qb = b.sequence().unwrap();
    let got = qb.load_prompt_cache(&b, &file).unwrap();
    assert_eq!(got, prompt, "{what}: token ids come back");
    assert_eq!(qb.cache_offset(), prompt.len() as i64, "{what}: offset");

    let (sa, sb) = (qa.snapshot(), qb.snapshot());
    let la = floats(&prefill(&mut a, &mut qa, suffix, 8).unwrap());
    let lb = floats(&prefill(&mut b, &mut qb, suffix, 8).unwrap());
    assert_eq!(la, lb, "{what}: suffix logits after loading");
    qa.restore(&sa).unwrap();
    qb.restore(&sb).unwrap();

    let full: Vec<u32> = prompt.iter().chain(suffix).copied().collect();
    let (mut a, mut b) = (Session::new(a).unwrap(), Session::new(b).unwrap());
    (a.seq, b.seq) = (qa, qb);
    a.seq.set_ids(prompt.to_vec());
    assert_eq!(b.seq.ids(), got, "{what}: the sequence holds the ids it read");
    let (ta, pa) = a.generate(&full, &params(), |_| true).unwrap();
    let (tb, pb) = b.generate(&full, &params(), |_| true).unwrap();
    assert_eq!(pb, suffix.len(), "{what}: only the suffix is prefilled");
    assert_eq!(pa, pb);
    assert_eq!(ta.tokens, tb.tokens, "{what}: same continuation");
    assert_eq!(tb.tokens.len(), 12);
}

#[test]
fn every_kv_cache_kind_round_trips_exactly() {
    let _g = common::mlx_lock();
    let dir = common::Scratch::new("prompt-cache");
    let (short, long) = (ids(13, 1), ids(37, 2));
    let suffix = ids(5, 3);
    round_trip("dense", "kv", CacheOptions::default(), &short, &suffix, dir.path());
    round_trip("kv8", "quantized", kv8(), &short, &suffix, dir.path());
    // Shorter than the window, then longer: the ring has wrapped when saved.
    round_trip("rotating", "rotating", rotating(false), &short, &suffix, dir.path());
    round_trip("rotating-wrapped", "rotating", rotating(false), &long, &suffix, dir.path());
    round_trip("rotating-kv8", "rotating", rotating(true), &long, &suffix, dir.path());
    // Saved before the quantization was due: the loaded cache converts on the same step.
    let late = CacheOptions { quantized_kv_start: 20, ..kv8() };
    round_trip("kv8-late", "kv", late, &short, &suffix, dir.path());
}

#[test]
fn recurrent_state_round_trips() {
    let _g = common::mlx_lock();
    let mut c = RecurrentCache::new(2);
    let s0 = mlx::random::normal(&[1, 3, 4], Dtype::F32, 0.0, 1.0, None).unwrap();
    let s1 = mlx::random::normal(&[1, 2, 8, 8], Dtype::F32, 0.0, 1.0, None).unwrap();
    c.set_state(vec![s0.clone(), s1.clone()], 7).unwrap();
    let (arrays, meta) = c.save().unwrap();
    let arrays: HashMap<String, Array> = arrays.into_iter().collect();
    let back = cache::load(&meta, &arrays).unwrap();
    assert_eq!(back.offset(), 7);
    let st = back.state();
    assert_eq!(st.len(), 2);
    assert_eq!(floats(&st[0]), floats(&s0));
    assert_eq!(floats(&st[1]), floats(&s1));
    // No state yet stays "no state yet".
    let (arrays, meta) = RecurrentCache::new(2).save().unwrap();
    let empty = cache::load(&meta, &arrays.into_iter().collect()).unwrap();
    assert!(empty.state().is_empty());
}

#[test]
fn a_file_for_another_model_is_refused() {
    let _g = common::mlx_lock();
    let dir = common::Scratch::new("prompt-cache-other");
    let file = dir.path().join("llama.safetensors");
    let prompt = ids(9, 4);
    let mut m = load("llama-bf16", CacheOptions::default());
    let mut seq = m.sequence().unwrap();
    prefill_last_alone(&mut m, &mut seq, &prompt, 8).unwrap();
    seq.save_prompt_cache(&m, &file, &prompt).unwrap();
    // Another family, and the same family's quantized checkpoint.
    for other in ["qwen3-bf16", "llama-q8"] {
        let o = load(other, CacheOptions::default());
        let mut os = o.sequence().unwrap();
        let e = os.load_prompt_cache(&o, &file).unwrap_err().to_string();
        assert!(e.contains(&file.display().to_string()) && e.contains("another model"), "{other}: {e}");
        assert!(!e.contains('\n'), "one line: {e}");
        assert_eq!(os.cache_offset(), 0, "{other}: caches untouched");
    }
    // The same model with other cache flags (as mlx-lm, refused rather
    // than silently running with the file's cache kinds).
    for opts in [kv8(), rotating(false)] {
        let o = load("llama-bf16", opts);
        let mut os = o.sequence().unwrap();
        let e = os.load_prompt_cache(&o, &file).unwrap_err().to_string();
        assert!(e.contains("cache flags") && e.contains("--kv-group-size"), "{e}");
        assert_eq!(os.cache_offset(), 0, "caches untouched");
    }
    // Not a prompt cache at all: a checkpoint's weights.
    let e =
        seq.load_prompt_cache(&m, &common::fixture("llama-bf16").join("model.safetensors")).unwrap_err().to_string();
    assert!(e.contains("not a famlx prompt cache"), "{e}");
    // MLX would silently append the extension.
    let e = seq.save_prompt_cache(&m, &dir.path().join("x.bin"), &prompt).unwrap_err();
    assert!(e.to_string().contains(".safetensors"), "{e}");
}

fn csv(v: &[u32]) -> String {
    v.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

#[test]
fn cli_cache_prompt_then_generate_prefills_only_the_suffix() {
    let dir = common::Scratch::new("prompt-cache-cli");
    let model = common::fixture("llama-bf16");
    let model = model.to_str().unwrap();
    let file = dir.path().join("p.safetensors");
    let file_s = file.to_str().unwrap();
    let prompt = ids(21, 5);
    let full: Vec<u32> = prompt.iter().chain(&ids(6, 6)).copied().collect();

    let o = common::run(&[
        "cache-prompt",
        "--model",
        model,
        "--prompt-ids",
        &csv(&prompt),
        "--prompt-cache-file",
        file_s,
        "--prefill-step-size",
        "8",
    ]);
    let (_, err) = common::texts(&o);
    assert!(o.status.success(), "cache-prompt failed: {err}");

    let gen = |extra: &[&str]| {
        let mut args =
            vec!["generate", "--model", model, "--prompt-ids", "", "--json", "-m", "10", "--prefill-step-size", "8"];
        let ids = csv(&full);
        args[4] = &ids;
        args.extend_from_slice(extra);
        common::json_of(&common::run(&args))
    };
    let cached = gen(&["--prompt-cache-file", file_s]);
    let plain = gen(&[]);
    assert_eq!(
        common::ids(&cached["tokens"]),
        common::ids(&plain["tokens"]),
        "the cached prefix must not change the answer"
    );
    assert_eq!(cached["prefilled_tokens"], full.len() - prompt.len());
    assert_eq!(cached["prompt_tokens"], full.len() - prompt.len());
    assert_eq!(cached["cached_tokens"], prompt.len());
    assert_eq!(plain["prefilled_tokens"], full.len());
    assert_eq!(plain["prompt_tokens"], full.len());

    // The same templated prompt again: all but its last token come from the file.
    let o = common::run(&["cache-prompt", "--model", model, "--prompt", "hello there", "--prompt-cache-file", file_s]);
    assert!(o.status.success(), "{}", common::texts(&o).1);
    let args = ["generate", "--model", model, "--prompt", "hello there", "--json", "-m", "6"];
    let plain = common::json_of(&common::run(&args));
    let mut with_file = args.to_vec();
    with_file.extend(["--prompt-cache-file", file_s]);
    let cached = common::json_of(&common::run(&with_file));
    assert_eq!(cached["prefilled_tokens"], 1);
    assert_eq!(cached["tokens"], plain["tokens"]);

    // Another model refuses the file, naming it.
    let q = common::fixture("qwen3-bf16");
    let o = common::run(&[
        "generate",
        "--model",
        q.to_str().unwrap(),
        "--prompt",
        "hello there",
        "--prompt-cache-file",
        file_s,
    ]);
    let (_, err) = common::texts(&o);
    assert!(!o.status.success());
    assert!(err.contains(file_s) && err.contains("another model"), "{err}");
}
