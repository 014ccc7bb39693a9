//! Hostile and broken model files: each gives one clear error line naming
//! the file and what is wrong, never a crash. The files are built here from
//! the default model (fetched once) and the fixtures.

mod common;

use common::{expect_error, fixture_copy, run, texts, Scratch};
use famlx_formats::gguf::{write::Writer, GgmlType, Gguf, MetaValue};
use std::path::{Path, PathBuf};

fn default_gguf() -> PathBuf {
    static GGUF: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    GGUF.get_or_init(|| famlx::default_model::ensure().expect("fetching the default model")).clone()
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
