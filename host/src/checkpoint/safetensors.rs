//! Safetensors shards: single file, index-listed shards, or every
//! `*.safetensors` of the folder. Every header is checked against its file
//! (dtypes, shapes, offsets, size) before MLX reads it, so a truncated or
//! hostile file is reported by name instead of failing mid-run.

use super::on_disk::OnDisk;
use anyhow::{anyhow, bail, Context, Result};
use mlx::Array;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Lists the shard files of a checkpoint folder.
pub fn shard_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join("model.safetensors.index.json");
    if index.exists() {
        let text = famlx_formats::input::read_input(&index, "a safetensors index", famlx_formats::input::MAX_JSON)
            .with_context(|| format!("{}: cannot read", index.display()))?;
        let names = famlx_formats::safetensors::index_shards(&text).map_err(|e| anyhow!("{}: {e}", index.display()))?;
        let mut out = Vec::new();
        for f in names {
            let p = dir.join(f);
            if !p.exists() {
                bail!("{}: shard listed in {} is missing", p.display(), index.display());
            }
            out.push(p);
        }
        return Ok(out);
    }
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("{}: cannot list", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    out.sort();
    if out.is_empty() {
        bail!("{}: no *.safetensors weights found", dir.display());
    }
    Ok(out)
}

/// Loads every tensor of a folder's shards (lazily), after checking each
/// shard's header against its file, with where each lies on disk. A tensor
/// stored in two shards is an error naming both.
pub fn load_dir(dir: &Path) -> Result<(HashMap<String, Array>, HashMap<String, OnDisk>)> {
    let mut all = HashMap::new();
    let mut on_disk = HashMap::new();
    let mut from: HashMap<String, PathBuf> = HashMap::new();
    for f in shard_files(dir)? {
        let header = famlx_formats::safetensors::check_file(&f).map_err(|e| anyhow!("{e}"))?;
        on_disk.extend(super::on_disk::index(&f, &header));
        let (t, _) = mlx::io::load_safetensors(&f)?;
        for (name, a) in t {
            if let Some(prev) = from.insert(name.clone(), f.clone()) {
                bail!("tensor {name} is stored twice: in {} and in {}", prev.display(), f.display());
            }
            all.insert(name, a);
        }
    }
    Ok((all, on_disk))
}
