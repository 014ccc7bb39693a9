//! The converted folder around the shards: where it may go (never onto,
//! into or above its source), `config.json` (with its quantization block),
//! and the temporary folder that becomes the output only once everything is
//! written.

use crate::checkpoint::Checkpoint;
use anyhow::{anyhow, bail, Context, Result};
use famlx_formats::input::{read_input_text, MAX_JSON};
use mlx::Dtype;
use plugin_api::ModelPlan;
use serde_json::{json, Map, Value};
use std::path::{Component, Path, PathBuf};

/// What the written config says about quantization.
pub enum QuantBlock {
    /// Quantized by this run: the default spec and per-module entries.
    New {
        /// The run's spec.
        spec: mlx::quant::QuantSpec,
        /// Modules quantized differently (pinned, recipe).
        entries: Map<String, Value>,
    },
    /// A block as it is (a GGUF's packed tensors).
    Declared(Value),
    /// Dequantized: no block.
    Drop,
}

/// Refuses an output folder that is a file or is not empty (unless
/// `force`), and one that resolves to its source, into it or above it
/// ([`check_apart`]). Returns the output's resolved path, which the rest
/// of the run writes to.
pub fn check_target(src: &Path, out: &Path, force: bool) -> Result<PathBuf> {
    let resolved = check_apart(src, out)?;
    if out.is_file() {
        bail!("{}: exists and is a file (the output is a folder)", out.display());
    }
    if out.is_dir() && !force {
        let mut entries = std::fs::read_dir(out).with_context(|| format!("{}: cannot list", out.display()))?;
        if entries.next().is_some() {
            bail!("{}: exists and is not empty (pass --force to replace it)", out.display());
        }
    }
    Ok(resolved)
}

/// `p` absolute, with symlinks, `.` and `..` resolved as far as it exists;
/// the parts that do not exist yet (they cannot be links) are applied by
/// name. `std::fs::canonicalize` alone needs the whole path to exist.
pub fn resolve(p: &Path) -> Result<PathBuf> {
    let abs = std::path::absolute(p).with_context(|| format!("{}: cannot resolve", p.display()))?;
    let parts: Vec<Component> = abs.components().collect();
    for k in (1..=parts.len()).rev() {
        let head: PathBuf = parts[..k].iter().collect();
        let Ok(mut out) = std::fs::canonicalize(&head) else { continue };
        for c in &parts[k..] {
            match c {
                Component::ParentDir => {
                    out.pop();
                }
                Component::Normal(n) => out.push(n),
                _ => {}
            }
        }
        return Ok(out);
    }
    Ok(abs)
}

/// Refuses an output that would destroy or swallow the source: the same
/// folder, a folder inside it, or one that holds it or any file of it,
/// compared after every link and `..` is resolved (a Hugging Face
/// snapshot's files are links into the repo's `blobs/`).
/// Returns the output's resolved path.
fn check_apart(src: &Path, out: &Path) -> Result<PathBuf> {
    let o = resolve(out)?;
    let s = resolve(src)?;
    let mut sources = vec![s.clone()];
    if s.is_dir() {
        let entries = std::fs::read_dir(&s).with_context(|| format!("{}: cannot list", src.display()))?;
        sources.extend(entries.filter_map(|e| std::fs::canonicalize(e.ok()?.path()).ok()));
    }
    for f in &sources {
        // Inside a file the source links to is harmless (or impossible).
        let why = if &o == f {
            "is the source"
        } else if f == &s && o.starts_with(f) {
            "is inside the source"
        } else if f.starts_with(&o) {
            "holds the source"
        } else {
            continue;
        };
        let which = if f == &s { String::new() } else { format!(" (through {})", f.display()) };
        bail!(
            "--mlx-path {}: {why} {}{which}; write the conversion to a folder apart from it",
            out.display(),
            src.display()
        );
    }
    Ok(o)
}

/// The source folder's config.json with generation_config's EOS merged in,
/// as `mlx_lm` reads a config.
pub fn folder_config(src: &Path) -> Result<Map<String, Value>> {
    let path = src.join("config.json");
    let text =
        read_input_text(&path, "a config", MAX_JSON).with_context(|| format!("{}: cannot read", path.display()))?;
    let Value::Object(mut c) =
        serde_json::from_str(&text).map_err(|e| anyhow!("{}: invalid JSON: {e}", path.display()))?
    else {
        bail!("{}: not a JSON object", path.display());
    };
    let gen = src.join("generation_config.json");
    if let Ok(text) = read_input_text(&gen, "a config", MAX_JSON) {
        if let Ok(g) = serde_json::from_str::<Value>(&text) {
            if let Some(eos) = g.get("eos_token_id").filter(|v| !v.is_null() && *v != &json!(false)) {
                c.insert("eos_token_id".into(), eos.clone());
            }
        }
    }
    c.remove("_name_or_path");
    Ok(c)
}

/// A config.json for a GGUF source: the family's parsed config (in
/// Hugging Face's field names) with the model type, architecture, head
/// tying, special token ids and storage type a loader needs.
pub fn gguf_config(
    plan: &ModelPlan,
    ck: &Checkpoint,
    dtype: Option<Dtype>,
    has_head: bool,
) -> Result<Map<String, Value>> {
    let Value::Object(mut c) = serde_json::from_str(plan.config.as_str())? else {
        bail!("{}: the family's config is not a JSON object", ck.source.display());
    };
    c.retain(|k, v| k != "gguf" && !v.is_null());
    let model_type = plan.model_type.to_string();
    let arch = match model_type.as_str() {
        "llama" => "LlamaForCausalLM".to_string(),
        "qwen3" => "Qwen3ForCausalLM".to_string(),
        t => format!("{}ForCausalLM", t[..1].to_uppercase() + &t[1..]),
    };
    c.insert("model_type".into(), json!(model_type));
    c.insert("architectures".into(), json!([arch]));
    c.insert("tie_word_embeddings".into(), json!(!has_head));
    c.insert("torch_dtype".into(), json!(dtype.unwrap_or(Dtype::F16).name()));
    if let Some(t) = &ck.tokenizer {
        if let Some((_, id)) = t.bos_token() {
            c.insert("bos_token_id".into(), json!(id));
        }
        if let Some(id) = t.eos_ids().first() {
            c.insert("eos_token_id".into(), json!(id));
        }
    }
    Ok(c)
}

/// Writes config.json: keys sorted, indented by four, the quantization
/// block mirrored as `quantization_config` (mlx_lm's layout).
pub fn write_config(dir: &Path, mut c: Map<String, Value>, q: Option<&QuantBlock>) -> Result<()> {
    match q {
        Some(QuantBlock::New { spec, entries }) => {
            let mut block = Map::new();
            block.insert("group_size".into(), json!(spec.group_size));
            block.insert("bits".into(), json!(spec.bits));
            block.insert("mode".into(), json!(spec.mode));
            block.extend(entries.clone());
            c.insert("quantization".into(), Value::Object(block));
        }
        Some(QuantBlock::Declared(b)) => {
            c.insert("quantization".into(), b.clone());
        }
        Some(QuantBlock::Drop) => {
            c.remove("quantization");
            c.remove("quantization_config");
        }
        None => {}
    }
    if let Some(b) = c.get("quantization").cloned() {
        c.insert("quantization_config".into(), b);
    }
    let mut sorted: Vec<(String, Value)> = c.into_iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let path = dir.join("config.json");
    std::fs::write(&path, super::shards::pretty(&Value::Object(sorted.into_iter().collect())))
        .with_context(|| format!("writing {}", path.display()))
}

/// A folder written beside the output and renamed onto it at the end; if
/// dropped before that (an error, a panic), it is removed.
pub struct TempDir {
    path: PathBuf,
    done: bool,
}

impl TempDir {
    /// Creates `.{name}.famlx-partial-{pid}` next to `out`.
    pub fn beside(out: &Path) -> Result<TempDir> {
        let name = out.file_name().ok_or_else(|| anyhow!("{}: not a folder name", out.display()))?;
        let parent = match out.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&parent).with_context(|| format!("{}: cannot create", parent.display()))?;
        let path = parent.join(format!(".{}.famlx-partial-{}", name.to_string_lossy(), std::process::id()));
        if path.exists() {
            std::fs::remove_dir_all(&path).with_context(|| format!("{}: cannot remove", path.display()))?;
        }
        std::fs::create_dir(&path).with_context(|| format!("{}: cannot create", path.display()))?;
        Ok(TempDir { path, done: false })
    }

    /// The folder being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Moves the finished folder to `out` (replacing it when `force`).
    pub fn commit(mut self, out: &Path, force: bool) -> Result<()> {
        if out.exists() {
            let empty = std::fs::read_dir(out).map(|mut d| d.next().is_none()).unwrap_or(false);
            if !empty && !force {
                bail!("{}: exists and is not empty (pass --force to replace it)", out.display());
            }
            if out.is_dir() {
                std::fs::remove_dir_all(out).with_context(|| format!("{}: cannot remove", out.display()))?;
            }
        }
        std::fs::rename(&self.path, out)
            .with_context(|| format!("moving {} to {}", self.path.display(), out.display()))?;
        self.done = true;
        Ok(())
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}
