//! Safetensors shards: single file, index-listed shards, or every
//! `*.safetensors` of the folder. Headers are checked against the file size so
//! a truncated download is reported by name instead of failing mid-run.

use anyhow::{anyhow, bail, Context, Result};
use mlx::Array;
use std::collections::{BTreeSet, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};

/// Lists the shard files of a checkpoint folder.
pub fn shard_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join("model.safetensors.index.json");
    if index.exists() {
        let text = std::fs::read_to_string(&index).with_context(|| format!("{}: cannot read", index.display()))?;
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| anyhow!("{}: invalid JSON: {e}", index.display()))?;
        let map = v
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| anyhow!("{}: missing field `weight_map`", index.display()))?;
        let files: BTreeSet<&str> = map.values().filter_map(|f| f.as_str()).collect();
        let mut out = Vec::new();
        for f in files {
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

/// Checks that a safetensors file holds all the bytes its header promises.
pub fn check_complete(path: &Path) -> Result<()> {
    let mut f = std::fs::File::open(path).with_context(|| format!("{}: cannot open", path.display()))?;
    let size = f.metadata()?.len();
    let mut n = [0u8; 8];
    f.read_exact(&mut n).map_err(|_| anyhow!("{}: truncated (no safetensors header)", path.display()))?;
    let hlen = u64::from_le_bytes(n);
    if hlen > size.saturating_sub(8) || hlen > 100 << 20 {
        bail!("{}: truncated or not safetensors (header of {hlen} bytes in a {size}-byte file)", path.display());
    }
    let mut h = vec![0u8; hlen as usize];
    f.read_exact(&mut h).map_err(|_| anyhow!("{}: truncated header", path.display()))?;
    let header: serde_json::Value =
        serde_json::from_slice(&h).map_err(|e| anyhow!("{}: corrupt safetensors header: {e}", path.display()))?;
    let end = header
        .as_object()
        .map(|o| {
            o.iter()
                .filter(|(k, _)| *k != "__metadata__")
                .filter_map(|(_, v)| v.get("data_offsets")?.get(1)?.as_u64())
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0);
    if 8 + hlen + end > size {
        bail!("{}: truncated ({} bytes, header needs {})", path.display(), size, 8 + hlen + end);
    }
    Ok(())
}

/// Loads every tensor of a folder's shards (lazily).
pub fn load_dir(dir: &Path) -> Result<HashMap<String, Array>> {
    let mut all = HashMap::new();
    for f in shard_files(dir)? {
        check_complete(&f)?;
        let (t, _) = mlx::io::load_safetensors(&f).map_err(|e| anyhow!("{}", e.0))?;
        all.extend(t);
    }
    Ok(all)
}
