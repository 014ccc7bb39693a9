//! Split GGUF files, as llama.cpp's `gguf-split` writes them:
//! `NAME-00001-of-00003.gguf`, `NAME-00002-of-00003.gguf`, … each a whole
//! GGUF with its own tensor table; the first holds the metadata, and every
//! part says which it is (`split.no`, from 0) and how many there are
//! (`split.count`; `split.tensors.count` is the total of tensors). The
//! first part is what a user names; the others are found beside it by
//! name, each checked to be the part its name says, and their tensor tables
//! are merged.

use anyhow::{anyhow, bail, Result};
use famlx_formats::gguf::{part_name, split_name, Gguf, MetaValue};
use mlx::Array;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The most parts a split GGUF may have (five digits in the names).
const MAX_PARTS: i64 = 99_999;

/// `key` of `g`'s metadata as one integer, if it is one.
fn int(g: &Gguf, key: &str) -> Option<i64> {
    match g.metadata.get(key) {
        Some(MetaValue::Ints(v)) if v.len() == 1 => Some(v[0]),
        _ => None,
    }
}

/// `(split.no, split.count)` of a part, checked (`(0, 1)` for a whole file).
fn place(g: &Gguf, path: &Path) -> Result<(i64, i64)> {
    let bad = |key: &str| anyhow!("{}: GGUF field `{key}` is not a part number of a split file", path.display());
    let count = match g.metadata.get("split.count") {
        None => 1,
        Some(_) => int(g, "split.count").filter(|c| (1..=MAX_PARTS).contains(c)).ok_or_else(|| bad("split.count"))?,
    };
    let no = match g.metadata.get("split.no") {
        None => 0,
        Some(_) => int(g, "split.no").filter(|n| (0..count).contains(n)).ok_or_else(|| bad("split.no"))?,
    };
    Ok((no, count))
}

/// Opens the GGUF at `path` and, when it is the first part of a split
/// file, every other part: each with its path, the first first. A part that
/// is missing, out of place, or not the first one named is one line naming
/// the file.
pub fn open_parts(path: &Path) -> Result<Vec<(PathBuf, Gguf)>> {
    let first = Gguf::open(path).map_err(|e| anyhow!("{e}"))?;
    let (no, count) = place(&first, path)?;
    if count == 1 {
        return Ok(vec![(path.to_path_buf(), first)]);
    }
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if no != 0 {
        let hint = part_name(name, 1).map(|f| format!(": open the first part, {f}")).unwrap_or_default();
        bail!("{}: part {} of a split GGUF ({count} parts){hint}", path.display(), no + 1);
    }
    if !matches!(split_name(name), Some((_, 1, of, _)) if of as i64 == count) {
        bail!(
            "{}: split GGUF ({count} parts) named otherwise than NAME-00001-of-{count:05}.gguf: \
             famlx finds the other parts by that name",
            path.display()
        );
    }
    let mut parts = vec![(path.to_path_buf(), first)];
    for i in 2..=count {
        let file = part_name(name, i as usize).expect("the name was checked above");
        let p = path.with_file_name(&file);
        if !p.exists() {
            bail!("{}: split GGUF ({count} parts): part {i}, {}, is missing", path.display(), p.display());
        }
        let g = Gguf::open(&p).map_err(|e| anyhow!("{e}"))?;
        let (pno, pcount) = place(&g, &p)?;
        if (pno, pcount) != (i - 1, count) {
            bail!(
                "{}: says it is part {} of {pcount} (split.no, split.count), its name part {i} of {count}",
                p.display(),
                pno + 1
            );
        }
        parts.push((p, g));
    }
    let total: usize = parts.iter().map(|(_, g)| g.tensors.len()).sum();
    if let Some(n) = int(&parts[0].1, "split.tensors.count") {
        if n != total as i64 {
            bail!("{}: split.tensors.count is {n}, and the {count} parts hold {total} tensors", path.display());
        }
    }
    Ok(parts)
}

/// The tensors of every part, read by `read`, in one map; an error in a
/// later part names it (the caller names the first), and a tensor in two
/// parts is an error naming both.
pub fn merge(
    parts: &[(PathBuf, Gguf)],
    read: impl Fn(&Gguf) -> Result<HashMap<String, Array>>,
) -> Result<HashMap<String, Array>> {
    if let [(_, g)] = parts {
        return read(g);
    }
    let mut out: HashMap<String, Array> = HashMap::new();
    let mut from: HashMap<String, usize> = HashMap::new();
    for (i, (path, g)) in parts.iter().enumerate() {
        let tensors = if i == 0 { read(g)? } else { read(g).map_err(|e| anyhow!("{}: {e:#}", path.display()))? };
        for (name, a) in tensors {
            if let Some(j) = from.insert(name.clone(), i) {
                bail!("tensor {name} is in both {} and {}", parts[j].0.display(), path.display());
            }
            out.insert(name, a);
        }
    }
    Ok(out)
}
