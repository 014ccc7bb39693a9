//! `famlx convert` against `mlx_lm.convert` (run from the reference
//! environment, tests/it/common/reference.rs): the same tensors byte for byte
//! and the same quantization block for every family, outputs mlx-lm loads
//! and agrees with famlx on, the other quantization modes and recipes, GGUF
//! to safetensors, re-sharding, dequantizing, streaming memory, and every
//! bad input refused with one line and no output folder.

use crate::common;

use common::reference;
use common::{fixture, json_of, run, texts, Scratch};
use serde_json::{json, Value};
use std::path::Path;

/// famlx convert, asserting success.
fn convert(args: &[&str]) -> String {
    let o = run(&[&["convert"], args].concat());
    let (out, err) = texts(&o);
    assert!(o.status.success(), "famlx convert {args:?} failed:\n{out}\n{err}");
    format!("{out}{err}")
}

/// famlx convert, asserting failure; returns stderr.
fn convert_fails(args: &[&str]) -> String {
    let o = run(&[&["convert"], args].concat());
    let (out, err) = texts(&o);
    assert!(!o.status.success(), "famlx convert {args:?} should have failed:\n{out}\n{err}");
    assert!(!err.contains("panicked"), "a panic, not an error line: {err}");
    err
}

/// Greedy tokens of famlx on `model` after `ids`.
fn famlx_tokens(model: &Path, ids: &str, n: usize) -> Vec<u64> {
    let o = run(&[
        "generate",
        "--model",
        model.to_str().unwrap(),
        "--prompt-ids",
        ids,
        "--max-tokens",
        &n.to_string(),
        "--json",
    ]);
    json_of(&o)["tokens"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap()).collect()
}

fn tokens_of(v: &Value) -> Vec<u64> {
    v["tokens"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap()).collect()
}

const IDS: &str = "1,5,9,33,70,2,101,7";
const IDS_V: [u32; 8] = [1, 5, 9, 33, 70, 2, 101, 7];

/// Tensors famlx keeps that mlx-lm (a text-only converter) drops: the
/// qwen3_5 MTP head and the vision/audio towers, as mlx-vlm keeps them.
fn famlx_only(name: &str) -> bool {
    ["language_model.mtp.", "vision_tower.", "embed_vision.", "audio_tower.", "embed_audio."]
        .iter()
        .any(|p| name.starts_with(p))
}

#[test]
fn affine_output_is_byte_identical_to_mlx_lm_and_loads_there() {
    let s = Scratch::new("convert-affine");
    let sources = [
        "llama-hf-bf16",
        "qwen3-bf16",
        "qwen3_5-hf-bf16",
        "gemma4-hf-bf16",
        "qwen3_5_moe-mtp-hf-f32",
        "gemma4-moe-hf-f32",
    ];
    let mut jobs = Vec::new();
    let mut cases = Vec::new();
    for src in sources {
        for bits in ["4", "8"] {
            let ours = s.path().join(format!("{src}-famlx-q{bits}"));
            let theirs = s.path().join(format!("{src}-mlx-lm-q{bits}"));
            let srcp = fixture(src);
            let args = ["--hf-path", srcp.to_str().unwrap(), "-q", "--q-bits", bits];
            convert(&[&args[..], &["--mlx-path", ours.to_str().unwrap()]].concat());
            reference::mlx_lm_convert(&[&args[..], &["--mlx-path", theirs.to_str().unwrap()]].concat());
            jobs.push(json!({"compare": [ours, theirs]}));
            if bits == "4" {
                jobs.push(json!({"generate": ours, "ids": IDS_V, "n": 8}));
            }
            cases.push((src, bits, ours));
        }
    }
    let results = reference::check(&Value::Array(jobs), s.path());
    let mut r = results.iter();
    for (src, bits, ours) in &cases {
        let c = r.next().unwrap();
        let what = format!("{src} q{bits}");
        assert!(c["common"].as_u64().unwrap() > 10, "{what}: {c}");
        assert_eq!(c["differ"], json!([]), "{what}: tensors differ from mlx_lm.convert's");
        assert_eq!(c["only_b"], json!([]), "{what}: tensors famlx did not write");
        for extra in c["only_a"].as_array().unwrap() {
            assert!(famlx_only(extra.as_str().unwrap()), "{what}: famlx wrote {extra} and mlx-lm did not");
        }
        assert_eq!(c["quant_a"], c["quant_b"], "{what}: quantization blocks differ");
        if *bits == "4" {
            let theirs = tokens_of(r.next().unwrap());
            assert_eq!(famlx_tokens(ours, IDS, 8), theirs, "{what}: mlx_lm.load of famlx's output generates otherwise");
        }
    }
}

#[test]
fn other_modes_and_mixed_recipes_round_trip_in_famlx_and_mlx_lm() {
    let s = Scratch::new("convert-modes");
    let src = fixture("llama-hf-bf16");
    let src = src.to_str().unwrap();
    let runs: [(&str, &[&str]); 5] = [
        ("mxfp4", &["--q-mode", "mxfp4"]),
        ("nvfp4", &["--q-mode", "nvfp4"]),
        ("mxfp8", &["--q-mode", "mxfp8"]),
        ("mixed_3_6", &["--quant-predicate", "mixed_3_6"]),
        ("mixed_2_6", &["--quant-predicate", "mixed_2_6", "--q-group-size", "32"]),
    ];
    let mut jobs = Vec::new();
    for (tag, flags) in runs {
        let ours = s.path().join(format!("famlx-{tag}"));
        let theirs = s.path().join(format!("mlx-lm-{tag}"));
        let base = ["--hf-path", src, "-q"];
        convert(&[&base[..], flags, &["--mlx-path", ours.to_str().unwrap()]].concat());
        reference::mlx_lm_convert(&[&base[..], flags, &["--mlx-path", theirs.to_str().unwrap()]].concat());
        jobs.push(json!({"compare": [ours, theirs]}));
        jobs.push(json!({"generate": ours, "ids": IDS_V, "n": 8}));
    }
    let results = reference::check(&Value::Array(jobs), s.path());
    for (i, (tag, _)) in runs.iter().enumerate() {
        let c = &results[2 * i];
        assert_eq!(c["differ"], json!([]), "{tag}: tensors differ from mlx_lm.convert's");
        assert_eq!((&c["only_a"], &c["only_b"]), (&json!([]), &json!([])), "{tag}: {c}");
        // mlx_lm.convert writes the recipe's entries with `"group_size": null`
        // when --q-group-size is not given (it means the default); famlx
        // writes the number.
        let mut q = c["quant_b"].clone();
        let g = q["group_size"].clone();
        for (_, e) in q.as_object_mut().unwrap().iter_mut().filter(|(_, e)| e.is_object()) {
            if e["group_size"].is_null() {
                e["group_size"] = g.clone();
            }
        }
        assert_eq!(c["quant_a"], q, "{tag}: quantization blocks differ");
        let theirs = tokens_of(&results[2 * i + 1]);
        let ours = famlx_tokens(&s.path().join(format!("famlx-{tag}")), IDS, 8);
        assert_eq!(ours, theirs, "{tag}: famlx and mlx-lm generate otherwise from famlx's output");
    }
    // The recipe really mixes widths: value and down projections at 6 bits.
    let cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(s.path().join("famlx-mixed_3_6/config.json")).unwrap()).unwrap();
    // (Two layers: the last is in the final eighth, the first is not.)
    assert_eq!(cfg["quantization"]["model.layers.1.mlp.down_proj"]["bits"], 6);
    assert_eq!(cfg["quantization"]["model.layers.0.mlp.down_proj"]["bits"], 3);
    assert_eq!(cfg["quantization"]["model.layers.0.self_attn.q_proj"]["bits"], 3);
    assert_eq!(cfg["quantization_config"], cfg["quantization"]);
}

#[test]
fn dequantize_matches_mlx_lm() {
    let s = Scratch::new("convert-dequant");
    let src = fixture("llama-q4");
    let (ours, theirs) = (s.path().join("famlx"), s.path().join("mlx-lm"));
    convert(&["--hf-path", src.to_str().unwrap(), "-d", "--mlx-path", ours.to_str().unwrap()]);
    reference::mlx_lm_convert(&["--hf-path", src.to_str().unwrap(), "-d", "--mlx-path", theirs.to_str().unwrap()]);
    let r = reference::check(&json!([{"compare": [ours, theirs]}]), s.path());
    assert_eq!(r[0]["differ"], json!([]), "{}", r[0]);
    assert_eq!((&r[0]["only_a"], &r[0]["only_b"]), (&json!([]), &json!([])), "{}", r[0]);
    assert_eq!(r[0]["quant_a"], Value::Null);
    // Dequantized, it generates what the quantized source does.
    assert_eq!(famlx_tokens(&ours, IDS, 8), famlx_tokens(&src, IDS, 8));
}

#[test]
fn gguf_converts_to_safetensors_that_generate_the_same() {
    let gguf = common::default_gguf();
    let s = Scratch::new("convert-gguf");
    let out = s.path().join("smollm2");
    convert(&["--hf-path", gguf.to_str().unwrap(), "--mlx-path", out.to_str().unwrap()]);
    for f in ["config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors.index.json"] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    let cfg: Value = serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(cfg["model_type"], "llama");
    assert_eq!(cfg["quantization"]["group_size"], 32);
    let prompt = ["--prompt", "What is the capital of France?", "--max-tokens", "12", "--json"];
    let a = json_of(&run(&[&["generate", "--model", gguf.to_str().unwrap()], &prompt[..]].concat()));
    let b = json_of(&run(&[&["generate", "--model", out.to_str().unwrap()], &prompt[..]].concat()));
    assert_eq!(a["prompt_tokens"], b["prompt_tokens"], "the converted tokenizer and template encode otherwise");
    assert_eq!(a["tokens"], b["tokens"]);
    assert!(b["text"].as_str().unwrap().contains("Paris"), "{}", b["text"]);
}

#[test]
fn shards_split_by_size_and_still_load() {
    let s = Scratch::new("convert-shards");
    let out = s.path().join("sharded");
    let src = fixture("llama-hf-bf16");
    convert(&["--hf-path", src.to_str().unwrap(), "--mlx-path", out.to_str().unwrap(), "--max-shard-size", "40KB"]);
    let index: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("model.safetensors.index.json")).unwrap()).unwrap();
    let files: std::collections::BTreeSet<&str> =
        index["weight_map"].as_object().unwrap().values().map(|v| v.as_str().unwrap()).collect();
    assert!(files.len() > 3, "{files:?}");
    let n = files.len();
    for f in &files {
        assert!(f.ends_with(&format!("-of-{n:05}.safetensors")), "{f}");
        let size = std::fs::metadata(out.join(f)).unwrap().len();
        assert!(size < 80 << 10, "{f}: {size} bytes");
    }
    assert_eq!(famlx_tokens(&out, IDS, 8), famlx_tokens(&src, IDS, 8));
}

#[test]
fn verify_reports_logit_difference_and_agreement() {
    let s = Scratch::new("convert-verify");
    let src = fixture("llama-hf-bf16");
    // "verify: first-step logits max |diff| X; top-1 agreement A/B (P%)"
    let verify = |tag: &str, flags: &[&str]| -> (f64, usize, usize) {
        let out = s.path().join(tag);
        let base = ["--hf-path", src.to_str().unwrap(), "--mlx-path", out.to_str().unwrap(), "--verify"];
        let text = convert(&[&base[..], flags].concat());
        let line = text.lines().find(|l| l.starts_with("verify:")).unwrap_or_else(|| panic!("no verify line: {text}"));
        let diff: f64 = line.split("|diff| ").nth(1).unwrap().split(';').next().unwrap().parse().unwrap();
        let agree = line.split("agreement ").nth(1).unwrap().split(' ').next().unwrap();
        let (a, b) = agree.split_once('/').unwrap();
        (diff, a.parse().unwrap(), b.parse().unwrap())
    };
    // Re-sharded only: the same numbers.
    assert_eq!(verify("same", &[]), (0.0, 64, 64));
    // 4-bit weights move the logits.
    let (diff, agree, steps) = verify("q4", &["-q"]);
    assert_eq!(steps, 64);
    assert!(diff > 0.0 && agree <= 64, "{diff} {agree}");
}

#[test]
fn streaming_keeps_memory_near_one_shard() {
    // A llama of 8 layers, hidden 512, in float32 (about 50 MB), written in
    // 4 MB shards: peak memory stays near two shards, not the model.
    let s = Scratch::new("convert-stream");
    let src = s.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    let (h, layers, inter, vocab) = (512, 8, 1024, 2048);
    let cfg = json!({
        "model_type": "llama", "hidden_size": h, "num_hidden_layers": layers, "intermediate_size": inter,
        "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": vocab, "rms_norm_eps": 1e-5,
        "tie_word_embeddings": false, "torch_dtype": "float32", "max_position_embeddings": 256
    });
    std::fs::write(src.join("config.json"), cfg.to_string()).unwrap();
    {
        let _g = common::mlx_lock();
        let mut tensors: Vec<(String, mlx::Array)> = Vec::new();
        let mut add = |name: String, shape: &[i32]| {
            let a = mlx::random::normal(shape, mlx::Dtype::F32, 0.0, 0.02, None).unwrap();
            a.eval().unwrap();
            tensors.push((name, a));
        };
        add("model.embed_tokens.weight".into(), &[vocab, h]);
        add("lm_head.weight".into(), &[vocab, h]);
        add("model.norm.weight".into(), &[h]);
        for l in 0..layers {
            for p in ["q_proj", "k_proj", "v_proj", "o_proj"] {
                add(format!("model.layers.{l}.self_attn.{p}.weight"), &[h, h]);
            }
            add(format!("model.layers.{l}.mlp.gate_proj.weight"), &[inter, h]);
            add(format!("model.layers.{l}.mlp.up_proj.weight"), &[inter, h]);
            add(format!("model.layers.{l}.mlp.down_proj.weight"), &[h, inter]);
            add(format!("model.layers.{l}.input_layernorm.weight"), &[h]);
            add(format!("model.layers.{l}.post_attention_layernorm.weight"), &[h]);
        }
        let refs: Vec<(&str, &mlx::Array)> = tensors.iter().map(|(n, a)| (n.as_str(), a)).collect();
        mlx::io::save_safetensors(&src.join("model.safetensors"), &refs, &[("format", "pt")]).unwrap();
    }
    std::fs::copy(fixture("llama-hf-bf16").join("tokenizer.json"), src.join("tokenizer.json")).unwrap();
    let out = s.path().join("out");
    let text =
        convert(&["--hf-path", src.to_str().unwrap(), "--mlx-path", out.to_str().unwrap(), "--max-shard-size", "4MB"]);
    let peak_mb: f64 = text.split("peak memory ").nth(1).unwrap().split(" MB").next().unwrap().parse().unwrap();
    let model_mb = std::fs::metadata(src.join("model.safetensors")).unwrap().len() as f64 / 1e6;
    assert!(model_mb > 40.0, "{model_mb}");
    assert!(peak_mb < 16.0, "peak {peak_mb} MB for a {model_mb} MB model in 4 MB shards:\n{text}");
}

#[test]
fn bad_inputs_get_one_line_and_leave_no_output() {
    let s = Scratch::new("convert-bad");
    let llama = fixture("llama-hf-bf16");
    let src = llama.to_str().unwrap();
    let out = s.path().join("out");
    let o = out.to_str().unwrap();
    let one_line = |e: &str| {
        let lines: Vec<&str> = e.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "one error line, got: {e}");
    };
    // A non-empty output folder is refused unless --force.
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("keep.txt"), b"x").unwrap();
    let e = convert_fails(&["--hf-path", src, "--mlx-path", o]);
    assert!(e.contains("not empty") && e.contains("--force"), "{e}");
    assert!(out.join("keep.txt").exists());
    convert(&["--hf-path", src, "--mlx-path", o, "--force"]);
    assert!(!out.join("keep.txt").exists() && out.join("model.safetensors").exists());
    std::fs::remove_dir_all(&out).unwrap();

    // Unsupported combinations.
    for (flags, says) in [
        (&["-q", "--q-bits", "7"][..], "2, 3, 4, 5, 6 or 8"),
        (&["-q", "--q-mode", "mxfp4", "--q-group-size", "64"][..], "group size 32"),
        (&["-q", "--q-mode", "nvfp4", "--quant-predicate", "mixed_3_6"][..], "affine"),
        (&["-q", "-d"][..], "not both"),
        (&["--q-bits", "4"][..], "need -q"),
        (&["--max-shard-size", "lots"][..], "--max-shard-size"),
    ] {
        let e = convert_fails(&[&["--hf-path", src, "--mlx-path", o][..], flags].concat());
        assert!(e.contains(says), "{flags:?}: {e}");
        one_line(&e);
    }
    // Already quantized.
    let q4 = fixture("llama-q4");
    let e = convert_fails(&["--hf-path", q4.to_str().unwrap(), "--mlx-path", o, "-q"]);
    assert!(e.contains("already quantized"), "{e}");
    // A missing source, a missing shard, a truncated shard, an unknown model_type.
    let e = convert_fails(&["--hf-path", "/nonexistent/ckpt", "--mlx-path", o]);
    assert!(e.contains("/nonexistent/ckpt"), "{e}");
    let broken = s.path().join("broken");
    common::copy_dir(&llama, &broken);
    std::fs::remove_file(broken.join("model-00002-of-00002.safetensors")).unwrap();
    let e = convert_fails(&["--hf-path", broken.to_str().unwrap(), "--mlx-path", o]);
    assert!(e.contains("model-00002-of-00002.safetensors"), "{e}");
    common::copy_dir(&llama, &broken);
    let shard = broken.join("model-00002-of-00002.safetensors");
    let len = std::fs::metadata(&shard).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&shard).unwrap().set_len(len / 2).unwrap();
    let e = convert_fails(&["--hf-path", broken.to_str().unwrap(), "--mlx-path", o]);
    assert!(e.contains("model-00002-of-00002.safetensors"), "{e}");
    common::copy_dir(&llama, &broken);
    let cfg = std::fs::read_to_string(broken.join("config.json")).unwrap().replace("\"llama\"", "\"nosuchmodel\"");
    std::fs::write(broken.join("config.json"), cfg).unwrap();
    let e = convert_fails(&["--hf-path", broken.to_str().unwrap(), "--mlx-path", o]);
    assert!(e.contains("nosuchmodel"), "{e}");
    // Nothing was left behind: no output, no partial folder.
    assert!(!out.exists(), "a failed conversion left {}", out.display());
    let partial = std::fs::read_dir(s.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .any(|e| e.file_name().to_string_lossy().contains("famlx-partial"));
    assert!(!partial, "a failed conversion left its temporary folder");
}

/// Every file of a folder with its bytes, names sorted.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap_or_default()))
        .collect();
    v.sort();
    v
}

/// An output that is the source, inside it or above it, however it is
/// spelt (`SRC/.`, `SRC/../src`, a link to it, its parent), is refused
/// with --force before anything is touched: the source keeps every file
/// and byte, and no partial folder is left.
#[test]
fn output_onto_into_or_above_the_source_is_refused() {
    let s = Scratch::new("convert-self");
    let src = s.path().join("src");
    common::copy_dir(&fixture("llama-hf-bf16"), &src);
    std::fs::write(src.join("notes.txt"), b"mine").unwrap();
    std::os::unix::fs::symlink(&src, s.path().join("link")).unwrap();
    let before = snapshot(&src);
    let sp = src.display().to_string();
    let outs = [
        (sp.clone(), "is the source"),
        (format!("{sp}/."), "is the source"),
        (format!("{sp}/../src"), "is the source"),
        (s.path().join("link").display().to_string(), "is the source"),
        (format!("{sp}/sub/out"), "is inside the source"),
        (format!("{sp}/nothere/../sub"), "is inside the source"),
        (s.path().display().to_string(), "holds the source"),
        (format!("{sp}/.."), "holds the source"),
    ];
    for (out, why) in outs {
        let e = convert_fails(&["--hf-path", &sp, "--mlx-path", &out, "--force"]);
        assert!(e.contains(&format!("--mlx-path {out}: {why}")) && e.contains(&sp), "{out}: {e}");
        assert_eq!(e.lines().filter(|l| !l.trim().is_empty()).count(), 1, "{e}");
        assert_eq!(snapshot(&src), before, "{out}: the source changed");
        let left: Vec<String> = std::fs::read_dir(s.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != "src" && n != "link")
            .collect();
        assert!(left.is_empty(), "{out}: left {left:?}");
    }
    // A folder beside it is fine, and the notes stay behind.
    let out = s.path().join("out");
    convert(&["--hf-path", &sp, "--mlx-path", out.to_str().unwrap()]);
    assert!(out.join("model.safetensors").exists() && !out.join("notes.txt").exists());
}

/// Side files are copied only when they are what they claim: a link that
/// leads out of the source folder is left behind with one warning line; a
/// link inside it is followed; a JSON side file that does not parse stops
/// the run before any work, naming it.
#[test]
fn side_files_are_checked_before_they_are_copied() {
    let s = Scratch::new("convert-side");
    let src = s.path().join("src");
    common::copy_dir(&fixture("llama-hf-bf16"), &src);
    let secret = s.path().join("secret.txt");
    std::fs::write(&secret, b"private").unwrap();
    std::os::unix::fs::symlink(&secret, src.join("README.md")).unwrap();
    std::fs::rename(src.join("special_tokens_map.json"), src.join("map.json")).unwrap();
    std::os::unix::fs::symlink("map.json", src.join("special_tokens_map.json")).unwrap();
    let sp = src.display().to_string();
    let out = s.path().join("out");
    let log = convert(&["--hf-path", &sp, "--mlx-path", out.to_str().unwrap()]);
    let warned: Vec<&str> = log.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(warned.len(), 1, "{log}");
    assert!(warned[0].contains("README.md") && warned[0].contains("outside the source folder"), "{log}");
    assert!(!out.join("README.md").exists(), "the link to a private file was copied");
    let copied = std::fs::symlink_metadata(out.join("special_tokens_map.json")).unwrap();
    assert!(copied.is_file(), "a link inside the source is copied as a file");
    assert_eq!(
        std::fs::read(out.join("special_tokens_map.json")).unwrap(),
        std::fs::read(src.join("map.json")).unwrap()
    );

    // A side file that is not JSON: refused before any work.
    std::fs::remove_file(src.join("README.md")).unwrap();
    std::fs::write(src.join("added_tokens.json"), b"{\"<x>\": 5").unwrap();
    let out2 = s.path().join("out2");
    let e = convert_fails(&["--hf-path", &sp, "--mlx-path", out2.to_str().unwrap()]);
    assert!(e.contains("added_tokens.json") && e.contains("not valid JSON"), "{e}");
    assert!(!e.contains("[INFO]") && !out2.exists(), "{e}");
}
