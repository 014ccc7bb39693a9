//! The reference environment for tests that run mlx-lm itself (the
//! converter checks): a virtual environment with fixtures/requirements.txt
//! (mlx 0.32.4, mlx-lm 0.32.2, ...), made once from PyPI in famlx's cache
//! and reused. `FAMLX_REF_PYTHON` points at an existing interpreter instead.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn requirements() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/requirements.txt")
}

/// The reference Python (made on first use; a failure to make it fails the test).
pub fn python() -> PathBuf {
    static PY: OnceLock<PathBuf> = OnceLock::new();
    PY.get_or_init(|| {
        if let Some(p) = std::env::var_os("FAMLX_REF_PYTHON") {
            return PathBuf::from(p);
        }
        let req = std::fs::read(requirements()).expect("fixtures/requirements.txt");
        // The folder is named for the requirements, so a change makes a new one.
        let hash = req.iter().fold(0xcbf29ce484222325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x100000001b3));
        let dir = famlx::default_model::cache_dir().join(format!("ref-venv-{hash:016x}"));
        let py = dir.join("bin").join("python");
        if dir.join(".complete").exists() {
            return py;
        }
        let _ = std::fs::remove_dir_all(&dir);
        let host = if Command::new("python3").arg("--version").output().is_ok() { "python3" } else { "python" };
        eprintln!("making the reference environment in {} (once)…", dir.display());
        run(Command::new(host).args(["-m", "venv"]).arg(&dir));
        run(Command::new(&py)
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r"])
            .arg(requirements()));
        std::fs::write(dir.join(".complete"), b"").unwrap();
        py
    })
    .clone()
}

fn run(c: &mut Command) {
    let o = c.output().unwrap_or_else(|e| panic!("{c:?}: {e}"));
    assert!(
        o.status.success(),
        "{c:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `python -m mlx_lm convert ARGS` (the reference converter).
pub fn mlx_lm_convert(args: &[&str]) {
    run(Command::new(python()).args(["-m", "mlx_lm", "convert"]).args(args));
}

/// Runs host/tests/data/mlx_lm_check.py on `jobs`, returning its results.
pub fn check(jobs: &serde_json::Value, scratch: &Path) -> Vec<serde_json::Value> {
    let f = scratch.join("jobs.json");
    std::fs::write(&f, jobs.to_string()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/mlx_lm_check.py");
    let o = Command::new(python()).arg(script).arg(&f).output().expect("running the reference Python");
    assert!(o.status.success(), "mlx_lm_check.py failed:\n{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("mlx_lm_check.py printed {out}: {e}"))
}
