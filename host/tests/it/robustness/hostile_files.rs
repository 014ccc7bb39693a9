//! Hostile and broken model files: each gives one clear error line naming
//! the file and what is wrong, never a crash. The files are built here from
//! the default model (fetched once) and the fixtures.

use crate::common;

use common::{expect_error, fixture_copy, run, texts, Scratch};
use famlx_formats::gguf::{write::Writer, GgmlType, Gguf, MetaValue};
use std::path::{Path, PathBuf};

fn default_gguf() -> PathBuf {
    common::default_gguf()
}

fn generate(model: &Path) -> Vec<String> {
    ["generate", "--model", &model.display().to_string(), "--prompt", "hi", "--max-tokens", "2"]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn patch_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Where the first tensor's entry (after its name) starts in the real file.
fn first_tensor_entry(bytes: &[u8]) -> usize {
    let name = Gguf::open(&default_gguf()).unwrap().tensors[0].name.clone();
    let mut pat = (name.len() as u64).to_le_bytes().to_vec();
    pat.extend_from_slice(name.as_bytes());
    bytes.windows(pat.len()).position(|w| w == pat.as_slice()).expect("the first tensor's name") + pat.len()
}

#[test]
fn hostile_gguf_headers_give_one_line() {
    let real = std::fs::read(default_gguf()).unwrap();
    let dir = Scratch::new("hostile-gguf");
    let case = |name: &str, bytes: &[u8], must: &[&str]| {
        let p = dir.path().join(format!("{name}.gguf"));
        std::fs::write(&p, bytes).unwrap();
        let mut m = vec![p.display().to_string()];
        m.extend(must.iter().map(|s| s.to_string()));
        expect_error(&args(&generate(&p)), &args(&m));
    };
    // The first 64 bytes with 2^62 tensors, padded with zeros.
    let mut b = real[..64].to_vec();
    patch_u64(&mut b, 8, 1 << 62);
    b.resize(64 * 1024, 0);
    case("tensors", &b, &["4611686018427387904 tensors"]);
    // The whole file with a huge metadata count, a huge first key length, and
    // a first tensor of a million dimensions.
    let mut b = real.clone();
    patch_u64(&mut b, 16, 1 << 62);
    case("kv-count", &b, &["metadata entries"]);
    let mut b = real.clone();
    patch_u64(&mut b, 24, 1 << 60);
    case("key-length", &b, &["metadata key 0", "does not fit"]);
    let mut b = real.clone();
    let at = first_tensor_entry(&b);
    b[at..at + 4].copy_from_slice(&1_000_000u32.to_le_bytes());
    case("dims", &b, &["1000000 dimensions"]);
    // Cut in half: the tensors' data is missing.
    case("half", &real[..real.len() / 2], &["past the end of the file", "truncated"]);
    case("empty", b"", &["empty file"]);
    case("magic", b"PK\x03\x04 not a gguf", &["not a GGUF file"]);
}

/// Sets the immutable flag on a file while it lives (root ignores
/// permission bits, not this flag), so a loader that opens the model for
/// writing fails even when the tests run as root.
struct Immutable(PathBuf);

impl Immutable {
    fn set(p: &Path) -> Option<Immutable> {
        let ok = std::process::Command::new("chattr").arg("+i").arg(p).output().is_ok_and(|o| o.status.success());
        ok.then(|| Immutable(p.to_path_buf()))
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        let _ = std::process::Command::new("chattr").arg("-i").arg(&self.0).output();
    }
}

#[test]
fn read_only_gguf_loads() {
    let dir = Scratch::new("ro-gguf");
    let p = dir.path().join("model.gguf");
    std::fs::copy(default_gguf(), &p).unwrap();
    let mut perm = std::fs::metadata(&p).unwrap().permissions();
    perm.set_readonly(true);
    std::fs::set_permissions(&p, perm).unwrap();
    let imm = Immutable::set(&p);
    if imm.is_none() {
        eprintln!("note: chattr +i unavailable; only the permission bits make the file read-only");
    }
    let o = run(&args(&generate(&p)));
    let (out, err) = texts(&o);
    drop(imm);
    assert!(o.status.success(), "a read-only GGUF did not load:\n{out}\n{err}");
}

#[test]
fn unsupported_gguf_tensor_type_is_named() {
    let dir = Scratch::new("iq-gguf");
    let mut w = Writer::new();
    w.meta("general.architecture", MetaValue::Str("llama".into())).tensor(
        "blk.0.attn_q.weight",
        &[256, 4],
        GgmlType::from_id(16).unwrap(),
        vec![0; 4 * 66],
    );
    let p = dir.path().join("iq.gguf");
    std::fs::write(&p, w.to_bytes()).unwrap();
    expect_error(&args(&generate(&p)), &["iq.gguf", "blk.0.attn_q.weight", "IQ2_XXS", "cannot read"]);
}

/// Rewrites the JSON header of a safetensors file with `f`, keeping its data.
fn edit_header(path: &Path, f: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>)) {
    let b = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
    let mut h: serde_json::Value = serde_json::from_slice(&b[8..8 + n]).unwrap();
    f(h.as_object_mut().unwrap());
    let text = h.to_string();
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(&b[8 + n..]);
    std::fs::write(path, out).unwrap();
}

#[test]
fn safetensors_dimension_past_32_bits_is_refused() {
    let ck = fixture_copy("llama-bf16");
    edit_header(&ck.path().join("model.safetensors"), |h| {
        h["model.norm.weight"]["shape"] = serde_json::json!([4294967552u64]);
    });
    let m = ck.path().display().to_string();
    expect_error(
        &["generate", "--model", &m, "--prompt-ids", "1,2", "--max-tokens", "2"],
        &["model.safetensors", "model.norm.weight", "4294967552"],
    );
}

#[test]
fn weight_map_may_not_leave_the_folder() {
    let ck = fixture_copy("llama-hf-bf16");
    let idx = ck.path().join("model.safetensors.index.json");
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&idx).unwrap()).unwrap();
    v["weight_map"]["model.norm.weight"] = "../../../../etc/passwd".into();
    std::fs::write(&idx, v.to_string()).unwrap();
    let m = ck.path().display().to_string();
    expect_error(
        &["generate", "--model", &m, "--prompt-ids", "1,2", "--max-tokens", "2"],
        &["model.safetensors.index.json", "model.norm.weight", "leaves the checkpoint folder"],
    );
}

#[test]
fn a_tensor_in_two_shards_is_refused() {
    let ck = fixture_copy("llama-hf-bf16");
    // Shard 1 copied over shard 2's name: every tensor of shard 1 is now stored twice.
    std::fs::copy(
        ck.path().join("model-00001-of-00002.safetensors"),
        ck.path().join("model-00002-of-00002.safetensors"),
    )
    .unwrap();
    let m = ck.path().display().to_string();
    expect_error(
        &["generate", "--model", &m, "--prompt-ids", "1,2", "--max-tokens", "2"],
        &["stored twice", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"],
    );
}

fn edit_config(dir: &Path, f: impl FnOnce(&mut serde_json::Value)) {
    let p = dir.join("config.json");
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(&p, v.to_string()).unwrap();
}

/// Configs that cannot describe the checkpoint are refused at load, naming
/// the field (or the tensors that do not fit) and both values.
#[test]
fn impossible_configs_name_the_field() {
    type Edit = fn(&mut serde_json::Value);
    let cases: &[(&str, Edit, &[&str])] = &[
        ("llama-bf16", |c| c["num_hidden_layers"] = (-3).into(), &["num_hidden_layers", "-3"]),
        ("llama-bf16", |c| c["num_attention_heads"] = 0.into(), &["num_attention_heads", "is 0"]),
        ("llama-bf16", |c| c["num_attention_heads"] = 3.into(), &["num_key_value_heads", "(3)"]),
        ("llama-bf16", |c| c["num_key_value_heads"] = 0.into(), &["num_key_value_heads", "is 0"]),
        ("llama-bf16", |c| c["num_hidden_layers"] = 1_000_000_000.into(), &["num_hidden_layers", "1000000000"]),
        ("llama-bf16", |c| c["hidden_act"] = "foo".into(), &["hidden_act", "\"foo\""]),
        ("llama-bf16", |c| c["rope_theta"] = 0.into(), &["rope_theta", "is 0"]),
        ("llama-tied-f32", |c| c["rms_norm_eps"] = (-1.0).into(), &["rms_norm_eps"]),
        ("qwen3-bf16", |c| c["head_dim"] = 0.into(), &["head_dim", "is 0"]),
        ("gemma4-hf-bf16", |c| c["text_config"]["num_hidden_layers"] = 100_000_000.into(), &["num_hidden_layers"]),
        (
            "gemma4-bf16",
            |c| drop(c["text_config"].as_object_mut().unwrap().remove("hidden_size")),
            &["hidden_size", "missing"],
        ),
        ("gemma4-bf16", |c| c["text_config"]["hidden_activation"] = "foo".into(), &["hidden_activation", "\"foo\""]),
        ("qwen3_5-hf-bf16", |c| c["text_config"]["num_hidden_layers"] = 100_000_000.into(), &["num_hidden_layers"]),
        ("qwen3_5-bf16", |c| c["text_config"]["linear_num_key_heads"] = 3.into(), &["linear_num_key_heads"]),
        // Shapes the weights do not have: every mismatched tensor listed, with both shapes.
        ("llama-bf16", |c| c["hidden_size"] = 128.into(), &["model.embed_tokens.weight", "[512, 64]", "[512, 128]"]),
        ("qwen3-q4", |c| c["vocab_size"] = 1024.into(), &["model.embed_tokens.weight", "expected [1024, 8]"]),
    ];
    for (fixture, edit, must) in cases {
        let ck = fixture_copy(fixture);
        edit_config(ck.path(), edit);
        let m = ck.path().display().to_string();
        let mut want = vec![m.as_str()];
        want.extend_from_slice(must);
        expect_error(&["generate", "--model", &m, "--prompt-ids", "1,2", "--max-tokens", "2"], &want);
    }
}

/// Replaces tensors of a single-file checkpoint.
fn edit_tensors(path: &Path, f: impl Fn(&str, &mlx::Array) -> Option<mlx::Array>) {
    let (tensors, meta) = mlx::io::load_safetensors(path).unwrap();
    let meta: Vec<(&str, &str)> = meta.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let kept: Vec<(String, mlx::Array)> = tensors.iter().filter_map(|(k, a)| f(k, a).map(|a| (k.clone(), a))).collect();
    let refs: Vec<(&str, &mlx::Array)> = kept.iter().map(|(k, a)| (k.as_str(), a)).collect();
    mlx::io::save_safetensors(path, &refs, &meta).unwrap();
}

#[test]
fn tensors_that_do_not_fit_are_named() {
    let _g = common::mlx_lock();
    type Edit = fn(&str, &mlx::Array) -> Option<mlx::Array>;
    let cases: &[(&str, Edit, &[&str])] = &[
        // A transposed projection.
        (
            "llama-hf-bf16",
            |k, a| {
                Some(if k == "model.layers.0.self_attn.q_proj.weight" {
                    a.t().unwrap().contiguous().unwrap()
                } else {
                    a.clone()
                })
            },
            &["model.layers.0.self_attn.q_proj.weight"],
        ),
        // An integer weight.
        (
            "llama-tied-f32",
            |k, a| Some(if k == "model.norm.weight" { a.astype(mlx::Dtype::I32).unwrap() } else { a.clone() }),
            &["model.norm.weight", "int32"],
        ),
        // Two tensors gone: both listed.
        (
            "llama-tied-f32",
            |k, a| {
                (!k.ends_with("layers.0.mlp.up_proj.weight") && !k.ends_with("layers.1.mlp.up_proj.weight"))
                    .then(|| a.clone())
            },
            &["2 missing weights", "model.layers.{0-1}.mlp.up_proj.weight"],
        ),
    ];
    for (fixture, edit, must) in cases {
        let ck = fixture_copy(fixture);
        for f in std::fs::read_dir(ck.path()).unwrap() {
            let p = f.unwrap().path();
            if p.extension().is_some_and(|e| e == "safetensors") {
                edit_tensors(&p, edit);
            }
        }
        let m = ck.path().display().to_string();
        let mut want = vec![m.as_str()];
        want.extend_from_slice(must);
        expect_error(&["generate", "--model", &m, "--prompt-ids", "1,2", "--max-tokens", "2"], &want);
    }
}

/// A GGUF with no key/value heads is refused naming its metadata key (it
/// was a division by zero).
#[test]
fn gguf_with_zero_kv_heads() {
    let mut b = std::fs::read(default_gguf()).unwrap();
    let key = b"llama.attention.head_count_kv";
    let at = b.windows(key.len()).position(|w| w == key).unwrap() + key.len();
    let ty = u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    assert_eq!(ty, 4, "head_count_kv is a u32");
    b[at + 4..at + 8].copy_from_slice(&0u32.to_le_bytes());
    let dir = Scratch::new("gguf-kv0");
    let p = dir.path().join("kv0.gguf");
    std::fs::write(&p, b).unwrap();
    expect_error(&args(&generate(&p)), &["kv0.gguf", "llama.attention.head_count_kv", "is 0"]);
}

/// Runs `famlx generate --json` on `dir` and returns (stdout JSON, stderr lines).
fn generate_json(dir: &Path, extra: &[&str]) -> (serde_json::Value, Vec<String>) {
    let m = dir.display().to_string();
    let mut a = vec!["generate", "--model", &m, "--prompt-ids", "1,2,3", "--max-tokens", "3", "--json"];
    a.extend_from_slice(extra);
    let o = run(&a);
    let (_, err) = texts(&o);
    let lines = err.lines().filter(|l| !l.trim().is_empty()).map(str::to_string).collect();
    (common::json_of(&o), lines)
}

/// An incomplete MTP head leaves the text model serving, with one warning
/// line naming what is missing; asking for it with --mtp-depth is an error.
#[test]
fn incomplete_mtp_head_degrades_with_one_warning() {
    let _g = common::mlx_lock();
    let ck = fixture_copy("qwen3_5-mtp-hf-bf16");
    edit_tensors(&ck.path().join("model.safetensors"), |k, a| {
        (k != "mtp.layers.0.self_attn.q_proj.weight").then(|| a.clone())
    });
    let (v, err) = generate_json(ck.path(), &[]);
    assert_eq!(v["tokens"].as_array().map(Vec::len), Some(3), "{v}");
    assert!(v["draft"].is_null(), "no drafting without the head: {v}");
    assert_eq!(err.len(), 1, "one warning line: {err:?}");
    assert!(
        err[0].starts_with("famlx: warning: speculative decoding off")
            && err[0].contains("language_model.mtp.layers.0.self_attn.q_proj.weight"),
        "{err:?}"
    );
    let m = ck.path().display().to_string();
    expect_error(
        &["generate", "--model", &m, "--prompt-ids", "1,2,3", "--max-tokens", "3", "--mtp-depth", "2"],
        &["--mtp-depth", "language_model.mtp.layers.0.self_attn.q_proj.weight"],
    );
}

/// A tensor no part of the model reads is a warning naming it (an untied
/// head run as tied would silently give other tokens); --strict refuses.
#[test]
fn unread_tensors_warn_and_strict_refuses() {
    let ck = fixture_copy("llama-bf16");
    edit_config(ck.path(), |c| c["tie_word_embeddings"] = true.into());
    let (_, err) = generate_json(ck.path(), &[]);
    assert_eq!(err.len(), 1, "{err:?}");
    assert!(
        err[0].starts_with("famlx: warning: ") && err[0].contains("1 tensor") && err[0].contains("lm_head.weight"),
        "{err:?}"
    );
    let m = ck.path().display().to_string();
    expect_error(
        &["generate", "--model", &m, "--prompt-ids", "1,2", "--max-tokens", "2", "--strict"],
        &["lm_head.weight", "--strict"],
    );
    // The intact checkpoint reads every tensor: no warning.
    let (_, err) = generate_json(&common::fixture("llama-bf16"), &["--strict"]);
    assert!(err.is_empty(), "{err:?}");
}
