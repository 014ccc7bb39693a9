//! Bad input gives one clear line naming the file or field, a non-zero exit
//! and no panic: broken checkpoints, unknown families, bad flags.

use crate::common;

use common::{expect_error, fixture, fixture_copy, run, texts, Scratch};
use std::path::Path;

fn gen_ids(model: &Path) -> Vec<String> {
    ["generate", "--model", &model.display().to_string(), "--prompt-ids", "1,2,3", "--max-tokens", "2"]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn edit_config(dir: &Path, f: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>)) {
    let p = dir.join("config.json");
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    f(v.as_object_mut().unwrap());
    std::fs::write(&p, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

#[test]
fn the_intact_copy_works() {
    // The baseline the cases below break: a scratch copy of the fixture runs.
    let ck = fixture_copy("llama-hf-bf16");
    let o = run(&args(&gen_ids(ck.path())));
    let (out, err) = texts(&o);
    assert!(o.status.success(), "{out}\n{err}");
}

#[test]
fn missing_shard() {
    let ck = fixture_copy("llama-hf-bf16");
    let shard = ck.path().join("model-00002-of-00002.safetensors");
    std::fs::remove_file(&shard).unwrap();
    expect_error(&args(&gen_ids(ck.path())), &["model-00002-of-00002.safetensors", "missing"]);
}

#[test]
fn missing_tensor() {
    // Shard 2 gone and dropped from the index too: the weights it held are missing.
    let ck = fixture_copy("llama-hf-bf16");
    std::fs::remove_file(ck.path().join("model-00002-of-00002.safetensors")).unwrap();
    let idx = ck.path().join("model.safetensors.index.json");
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&idx).unwrap()).unwrap();
    let map = v["weight_map"].as_object_mut().unwrap();
    let gone: Vec<String> =
        map.iter().filter(|(_, f)| *f == "model-00002-of-00002.safetensors").map(|(k, _)| k.clone()).collect();
    assert!(!gone.is_empty());
    map.retain(|_, f| f != "model-00002-of-00002.safetensors");
    std::fs::write(&idx, v.to_string()).unwrap();
    let line = expect_error(&args(&gen_ids(ck.path())), &[]);
    assert!(gone.iter().any(|t| line.contains(t.trim_end_matches(".weight"))), "names a missing tensor: {line}");
}

#[test]
fn truncated_safetensors() {
    let ck = fixture_copy("llama-bf16");
    let st = ck.path().join("model.safetensors");
    let len = std::fs::metadata(&st).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&st).unwrap();
    f.set_len(len / 2).unwrap();
    drop(f);
    expect_error(&args(&gen_ids(ck.path())), &["model.safetensors", "truncated"]);

    // Cut inside the header: still named, still one line.
    std::fs::OpenOptions::new().write(true).open(&st).unwrap().set_len(20).unwrap();
    expect_error(&args(&gen_ids(ck.path())), &["model.safetensors"]);
}

#[test]
fn unknown_model_type() {
    let ck = fixture_copy("llama-tied-f32");
    edit_config(ck.path(), |c| {
        c.insert("model_type".into(), "nosuchfamily".into());
    });
    expect_error(&args(&gen_ids(ck.path())), &["nosuchfamily", "model_type"]);
}

#[test]
fn config_missing_a_field() {
    for (variant, field) in
        [("llama-tied-f32", "hidden_size"), ("qwen3-bf16", "hidden_size"), ("qwen3-bf16", "head_dim")]
    {
        let ck = fixture_copy(variant);
        edit_config(ck.path(), |c| {
            c.remove(field);
        });
        expect_error(&args(&gen_ids(ck.path())), &["config.json", field]);
    }
    let ck = fixture_copy("llama-tied-f32");
    edit_config(ck.path(), |c| {
        c.remove("model_type");
    });
    expect_error(&args(&gen_ids(ck.path())), &["config.json", "model_type"]);
}

#[test]
fn config_not_json() {
    let ck = fixture_copy("llama-tied-f32");
    std::fs::write(ck.path().join("config.json"), "{ not json").unwrap();
    expect_error(&args(&gen_ids(ck.path())), &["config.json"]);
}

#[test]
fn unreadable_tokenizer() {
    let ck = fixture_copy("llama-tied-f32");
    std::fs::write(ck.path().join("tokenizer.json"), b"\x00\x01 garbage {").unwrap();
    let m = ck.path().display().to_string();
    expect_error(&["generate", "--model", &m, "--prompt", "hello", "--max-tokens", "2"], &["tokenizer.json"]);
    expect_error(&["generate", "--model", &m, "--prompt", "hello", "--raw", "--max-tokens", "2"], &["tokenizer.json"]);
    // Token ids need no tokenizer: that still runs.
    let o = run(&args(&gen_ids(ck.path())));
    let (out, err) = texts(&o);
    assert!(o.status.success(), "--prompt-ids without a tokenizer:\n{out}\n{err}");
}

#[test]
fn nonexistent_model_path() {
    let dir = Scratch::new("nomodel");
    let p = dir.path().join("no-such-model");
    let m = p.display().to_string();
    expect_error(&["generate", "--model", &m, "--prompt-ids", "1"], &[&m]);
    // A file that is not a checkpoint.
    let f = dir.path().join("notes.txt");
    std::fs::write(&f, "hi").unwrap();
    let f = f.display().to_string();
    expect_error(&["generate", "--model", &f, "--prompt-ids", "1"], &[&f]);
}

#[test]
fn bad_flag_values() {
    let m = fixture("llama-tied-f32").display().to_string();
    let base = ["generate", "--model", &m, "--prompt-ids", "1,2", "--max-tokens", "2"];
    let with = |extra: &[&'static str]| -> Vec<&str> { base.iter().copied().chain(extra.iter().copied()).collect() };
    expect_error(&with(&["--top-p", "2"]), &["--top-p", "2"]);
    expect_error(&with(&["--temperature=-1"]), &["--temperature"]);
    expect_error(&with(&["--prefill-step-size", "0"]), &["--prefill-step-size"]);
    expect_error(&["generate", "--model", &m, "--prompt-ids", "1,x"], &["--prompt-ids", "x"]);
    expect_error(&["generate", "--model", &m, "--prompt-ids", "1,99999"], &["99999", "vocabulary"]);
}

/// Through the library too (not only the CLI), ids outside the vocabulary
/// are refused before they reach MLX's unchecked embedding gather; a model
/// whose source tensors were released refuses a hot reload with the flag
/// that keeps them; speculative flags out of range name the flag.
#[test]
fn library_refuses_bad_ids_and_reload_without_source() {
    let _g = common::mlx_lock();
    let reg = famlx::plugins::Registry::discover(&famlx::plugins::search_dirs(&[]));
    let opts = famlx::cache::CacheOptions::default();
    let mut m = famlx::model::LoadedModel::load(&fixture("llama-bf16"), &reg, None, opts).unwrap();
    let p = famlx::decode::GenParams { max_tokens: 2, ..Default::default() };
    let mut seq = m.sequence().unwrap();
    let e = famlx::decode::generate(&mut m, &mut seq, &[1, 2, 512], &p, |_| true).unwrap_err();
    assert!(format!("{e:#}").contains("token id 512 is outside the vocabulary of 512"), "{e:#}");
    m.release_source();
    assert_eq!(famlx::decode::generate(&mut m, &mut seq, &[1, 2, 3], &p, |_| true).unwrap().tokens.len(), 2);
    let fam = m.family.clone();
    let e = m.swap_family(fam).unwrap_err();
    assert!(format!("{e:#}").contains("--watch"), "{e:#}");
    let mut a = gen_ids(&fixture("llama-bf16"));
    a.extend(["--mtp-depth".to_string(), "0".to_string()]);
    expect_error(&args(&a), &["--mtp-depth"]);
}

/// Sampling flags are checked against their rules, negative numbers taken
/// as values (not as unknown flags).
#[test]
fn sampling_flags_follow_their_rules() {
    let m = fixture("llama-tied-f32").display().to_string();
    let base = ["generate", "--model", &m, "--prompt-ids", "1,2", "--max-tokens", "2"];
    for (flag, value, must) in [
        ("--temperature", "nan", "NaN"),
        ("--temperature", "-1", "-1"),
        ("--temperature", "inf", "inf"),
        ("--min-p", "2", "[0, 1]"),
        ("--min-p", "-1", "[0, 1]"),
        ("--top-k", "-1", "≥ 0"),
        ("--top-p", "-0.5", "[0, 1]"),
        ("--draft-min-confidence", "-0.1", "[0, 1)"),
    ] {
        let mut a: Vec<&str> = base.to_vec();
        a.extend([flag, value]);
        expect_error(&a, &[flag, must]);
    }
}

/// Warnings on a pipe carry no colour codes, and a refused plugin's path
/// is printed once.
#[test]
fn logs_are_plain_and_name_a_refused_plugin_once() {
    let dir = Scratch::new("junk-plugin");
    let junk =
        dir.path().join(format!("{}junk{}", famlx::plugins::plugin_pattern().0, famlx::plugins::plugin_pattern().1));
    std::fs::write(&junk, b"not a library").unwrap();
    let m = fixture("llama-tied-f32").display().to_string();
    let d = dir.path().display().to_string();
    let o = run(&["generate", "--plugin-dir", &d, "--model", &m, "--prompt-ids", "1,2", "--max-tokens", "2"]);
    let (out, err) = texts(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(!err.contains('\x1b'), "colour codes on a pipe: {err:?}");
    let line = err.lines().find(|l| l.contains("refused plugin")).unwrap_or_else(|| panic!("no warning: {err}"));
    assert!(line.starts_with("famlx: warning: "), "{line}");
    assert_eq!(line.matches(&junk.display().to_string()).count(), 1, "{line}");
}

/// An empty chat template file is ignored with a warning (the prompt is
/// not silently dropped).
#[test]
fn empty_chat_template_is_ignored_with_a_warning() {
    let ck = fixture_copy("qwen3-bf16");
    std::fs::write(ck.path().join("chat_template.jinja"), "  \n").unwrap();
    let m = ck.path().display().to_string();
    let o = run(&["generate", "--model", &m, "--prompt", "hello there", "--max-tokens", "2", "--json"]);
    let (out, err) = texts(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(err.contains("chat_template.jinja: empty chat template, ignored"), "{err}");
    let v = common::json_of(&o);
    assert!(v["prompt_tokens"].as_u64().unwrap() > 2, "the prompt was dropped: {v}");
}

/// Integer flags past what their use can hold are usage errors naming the
/// flag and the value, never truncated (`bench -p 4294967297` ran one token
/// and reported 4294967297; `--max-kv-size 4294967297` made a window of 1)
/// nor sized into memory (`--max-queue`, `--request-timeout`).
#[test]
fn integer_flags_out_of_range_are_usage_errors_not_truncated() {
    let m = fixture("llama-tied-f32").display().to_string();
    let generate = ["generate", "--model", &m, "--prompt-ids", "1,2"];
    for (cmd, flag, value) in [
        (&["bench", "--model", &m][..], "--prompt-tokens", "4294967297"),
        (&["bench", "--model", &m][..], "--generation-tokens", "4294967297"),
        (&generate[..], "--max-tokens", "4294967297"),
        (&generate[..], "--max-kv-size", "4294967297"),
        (&generate[..], "--prefill-step-size", "2147483648"),
        (&generate[..], "--quantized-kv-start", "9223372036854775808"),
        (&["serve", "--model", &m][..], "--max-queue", "4294967296"),
        (&["serve", "--model", &m][..], "--request-timeout", "18446744073709551615"),
        (&["launch", "--", "plugins"][..], "--repeat-hosts", "4294967297"),
    ] {
        let mut a: Vec<&str> = cmd.to_vec();
        // Before `--` where there is one.
        let at = a.iter().position(|x| *x == "--").unwrap_or(a.len());
        a.splice(at..at, [flag, value]);
        let o = run(&a);
        let (_, err) = texts(&o);
        assert_eq!(o.status.code(), Some(2), "{a:?}: {err}");
        let first = err.lines().next().unwrap_or_default();
        assert!(
            first.starts_with("error: invalid value") && first.contains(flag) && first.contains(value),
            "{a:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
    // In range but more than the model's context: refused before the
    // random prompt (8 GiB of ids here) is drawn.
    let t0 = std::time::Instant::now();
    expect_error(&["bench", "--model", &m, "-p", "2147483647", "-g", "1"], &["-p 2147483647 + -g 1", "context"]);
    assert!(t0.elapsed() < std::time::Duration::from_secs(30), "took {:?}", t0.elapsed());
}
