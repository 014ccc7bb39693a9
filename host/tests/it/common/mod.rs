//! Helpers shared by the integration tests: fixture paths, scratch folders,
//! plugin folders, running the `famlx` binary, and one lock around MLX.
#![allow(dead_code)] // not every helper has a user in every build

pub mod hub_server;
pub mod names;
pub mod parity;
pub mod reference;
pub mod server;
/// The text crate's test data (real tokenizers fetched once), included once
/// here so its fetch lock is one for the whole binary.
#[path = "../../../../text/tests/common/mod.rs"]
pub mod text;
pub mod vision;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

/// The eight reference fixtures (see fixtures/README.md).
pub const FIXTURES: [&str; 8] =
    ["llama-bf16", "llama-q4", "llama-q8", "llama-tied-f32", "llama-hf-bf16", "qwen3-bf16", "qwen3-q4", "qwen3-q8"];

/// The gemma4 fixtures (tests/it/families/gemma4/parity.rs;
/// fixtures/make_gemma4_fixtures.py),
/// the two assistant drafters last.
pub const GEMMA4_FIXTURES: [&str; 8] = [
    "gemma4-hf-bf16",
    "gemma4-bf16",
    "gemma4-q4",
    "gemma4-e2b-bf16",
    "gemma4-moe-hf-f32",
    "gemma4-moe-q4",
    "gemma4-assistant-bf16",
    "gemma4-assistant-ordered-bf16",
];

/// The qwen3_5 fixtures (fixtures/make_qwen3_5_fixtures.py), tested in
/// tests/it/families/qwen3_5/parity.rs.
pub const QWEN3_5_FIXTURES: [&str; 7] = [
    "qwen3_5-hf-bf16",
    "qwen3_5-bf16",
    "qwen3_5-q4",
    "qwen3_5_moe-f32",
    "qwen3_5_moe-q4",
    "qwen3_5-mtp-hf-bf16",
    "qwen3_5_moe-mtp-hf-f32",
];

/// The image-input fixtures (tests/it/families/gemma4/vision.rs,
/// tests/it/families/qwen3_5/vision.rs;
/// fixtures/make_{gemma4,qwen3_5}_vision_fixtures.py).
pub const VISION_FIXTURES: [&str; 6] = [
    "gemma4-vision-hf-f32",
    "gemma4-vision-f32",
    "gemma4-vision-q4",
    "qwen3_5-vl-hf-f32",
    "qwen3_5-vl-f32",
    "qwen3_5-vl-q4",
];

/// Fixtures with audio (tests/it/families/gemma4/audio.rs,
/// tests/it/families/gemma4_unified/parity.rs).
pub const AUDIO_FIXTURES: [&str; 3] = ["gemma4-audio-hf-f32", "gemma4-audio-f32", "gemma4_unified-f32"];

/// `fixtures/<name>` in the repository.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("fixtures").join(name)
}

/// A fixture's expected.json.
pub fn expected(name: &str) -> serde_json::Value {
    let p = fixture(name).join("expected.json");
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// MLX graphs are built and evaluated from one test thread at a time (the
/// test harness runs tests of one binary on several threads).
pub fn mlx_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// One distributed run at a time in this process (tests/it/distributed.rs,
/// a server over ranks in tests/it/serve/api.rs): each picks free ports for
/// its ring just before its ranks bind them, which a run beside it could
/// take meanwhile.
pub fn distributed_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// A scratch folder under the target dir, removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    /// A new empty folder whose name contains `tag`.
    pub fn new(tag: &str) -> Scratch {
        static N: AtomicUsize = AtomicUsize::new(0);
        let base = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let p = base.join(format!("famlx-{tag}-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        Scratch(p)
    }
    /// The folder.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Copies the files of `src` (not recursive: checkpoints are flat) into `dst`.
pub fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap_or_else(|e| panic!("{}: {e}", src.display())) {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
        }
    }
}

/// A scratch copy of a fixture.
pub fn fixture_copy(name: &str) -> Scratch {
    let s = Scratch::new(name);
    copy_dir(&fixture(name), s.path());
    s
}

/// The default model's GGUF, fetched once for the whole test binary:
/// `famlx::default_model::ensure` names its download by process id, so
/// two threads of this process must not fetch it at once.
pub fn default_gguf() -> PathBuf {
    static GGUF: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    GGUF.get_or_init(|| famlx::default_model::ensure().expect("fetching the default model")).clone()
}

/// The folder holding the test binary: `target/<profile>/deps`, where cargo
/// puts the cdylibs of host's dev-dependencies (the plugins).
pub fn deps_dir() -> PathBuf {
    std::env::current_exe().unwrap().parent().unwrap().to_path_buf()
}

/// A built cdylib in [`deps_dir`] by its library name (e.g. `famlx_plugin_llama`).
pub fn cdylib(lib: &str) -> PathBuf {
    let (pre, suf) = if cfg!(target_os = "macos") {
        ("lib", ".dylib")
    } else if cfg!(windows) {
        ("", ".dll")
    } else {
        ("lib", ".so")
    };
    let p = deps_dir().join(format!("{pre}{lib}{suf}"));
    assert!(p.is_file(), "{} was not built (it is a dev-dependency of famlx)", p.display());
    p
}

/// The registry the tests use: the normal search path, which covers the
/// plugin cdylibs next to the test binary.
pub fn registry() -> famlx::plugins::Registry {
    let r = famlx::plugins::Registry::discover(&famlx::plugins::search_dirs(&[]));
    for fam in ["llama", "qwen3"] {
        assert!(
            r.families().any(|f| f.name == fam),
            "plugin for `{fam}` not found; refused: {:?}",
            r.refused.iter().map(|x| format!("{}: {}", x.path.display(), x.reason)).collect::<Vec<_>>()
        );
    }
    r
}

/// The `famlx` binary, with the test's plugin folder on its search path
/// (under `cargo test -p famlx` the plugins are only in `deps/`).
pub fn famlx() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_famlx"));
    c.env("FAMLX_PLUGIN_PATH", deps_dir());
    c.env_remove("FAMLX_LOG");
    c
}

/// Runs `famlx` with `args`.
pub fn run(args: &[&str]) -> Output {
    famlx().args(args).output().expect("running famlx")
}

/// `famlx chat` with `args`, fed `lines` on stdin (then EOF), run to its end.
pub fn chat(args: &[&str], lines: &[String]) -> Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = famlx()
        .arg("chat")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running famlx chat");
    {
        let stdin = child.stdin.as_mut().unwrap();
        for l in lines {
            writeln!(stdin, "{l}").unwrap();
        }
    }
    child.wait_with_output().expect("waiting for famlx chat")
}

/// stdout and stderr as text.
pub fn texts(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// Parses the `--json` line of a successful `famlx generate`.
pub fn json_of(o: &Output) -> serde_json::Value {
    let (out, err) = texts(o);
    assert!(o.status.success(), "famlx failed ({}):\nstdout: {out}\nstderr: {err}", o.status);
    let line = out
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON in stdout: {out}"));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("bad JSON {line}: {e}"))
}

/// A `Vec<u32>` from a JSON array of ids.
pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().unwrap_or_else(|| panic!("not an array: {v}")).iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

/// Runs `famlx args…` and checks it fails with exactly one stderr line,
/// `famlx: error: …`, that contains every string of `must`. Returns the line.
pub fn expect_error(args: &[&str], must: &[&str]) -> String {
    check_error(args, run(args), must)
}

/// [`expect_error`] for a command that might hang (an input that blocks):
/// killed, and the test failed, if it runs past `secs` seconds.
#[allow(dead_code)]
pub fn expect_error_within(secs: u64, args: &[&str], must: &[&str]) -> String {
    let mut child = famlx()
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("running famlx");
    let end = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while child.try_wait().expect("waiting for famlx").is_none() {
        if std::time::Instant::now() > end {
            let _ = child.kill();
            let (_, err) = texts(&child.wait_with_output().unwrap());
            panic!("famlx {args:?} still ran after {secs} s (blocked?):\n{err}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    check_error(args, child.wait_with_output().expect("famlx output"), must)
}

/// The checks of [`expect_error`] on a finished run.
fn check_error(args: &[&str], o: Output, must: &[&str]) -> String {
    let (out, err) = texts(&o);
    assert!(!err.contains("panicked at"), "famlx {args:?} panicked:\n{err}");
    assert!(!o.status.success(), "famlx {args:?} succeeded:\nstdout: {out}\nstderr: {err}");
    assert_eq!(o.status.code(), Some(1), "famlx {args:?} did not exit normally:\n{err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "famlx {args:?}: expected one stderr line, got:\n{err}");
    let line = lines[0];
    eprintln!("famlx {args:?}\n  → {line}");
    assert!(line.starts_with("famlx: error: "), "famlx {args:?}: {line}");
    for m in must {
        assert!(line.contains(m), "famlx {args:?}: `{m}` not in: {line}");
    }
    line.to_string()
}
