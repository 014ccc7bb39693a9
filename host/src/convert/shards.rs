//! Writing converted tensors as mlx-community shards: split by size as
//! `mlx_lm`'s `make_shards` does, each shard evaluated, written and dropped
//! before the next is computed (so memory stays near one shard whatever
//! the model's size), then `model.safetensors.index.json`.

use anyhow::{anyhow, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use mlx::Array;
use serde_json::{json, Map, Value};
use std::io::IsTerminal;
use std::path::Path;

/// A tensor to write: its name, its (lazy) value, and the parameters it
/// stands for (a packed quantized weight counts its unpacked elements).
pub struct OutTensor {
    /// Name in the output.
    pub name: String,
    /// Value, usually not evaluated yet.
    pub array: Array,
    /// Parameters it counts for in the index's `total_parameters`.
    pub params: u64,
}

/// Splits tensors (in order) into shards of at most `max_bytes`; a tensor
/// larger than that gets a shard of its own.
pub fn plan(sizes: &[usize], max_bytes: u64) -> Vec<std::ops::Range<usize>> {
    let mut out: Vec<std::ops::Range<usize>> = Vec::new();
    let mut size = 0u64;
    for (i, &n) in sizes.iter().enumerate() {
        match out.last_mut() {
            Some(r) if size + n as u64 <= max_bytes => {
                r.end = i + 1;
                size += n as u64;
            }
            _ => {
                out.push(i..i + 1);
                size = n as u64;
            }
        }
    }
    out
}

/// What was written.
pub struct Written {
    /// Shard files.
    pub shards: usize,
    /// Bytes of tensor data.
    pub bytes: u64,
}

/// Writes `tensors` into `dir` in shards of at most `max_bytes`, with the
/// index file. Each shard's tensors are evaluated one by one (a progress bar
/// per shard on a terminal), saved with `{"format": "mlx"}` metadata, and
/// released before the next shard.
pub fn write(dir: &Path, mut tensors: Vec<OutTensor>, max_bytes: u64) -> Result<Written> {
    let sizes: Vec<usize> = tensors.iter().map(|t| t.array.nbytes()).collect();
    let total: u64 = sizes.iter().map(|&n| n as u64).sum();
    let params: u64 = tensors.iter().map(|t| t.params).sum();
    let ranges = plan(&sizes, max_bytes);
    let count = ranges.len();
    let file = |i: usize| {
        if count == 1 {
            "model.safetensors".to_string()
        } else {
            format!("model-{:05}-of-{count:05}.safetensors", i + 1)
        }
    };
    let mut weight_map = Map::new();
    // Shards are taken off the front as they are written, so each one's
    // arrays (and the source tensors they hold) are released after it.
    let mut rest = tensors.drain(..).collect::<std::collections::VecDeque<_>>();
    for (i, r) in ranges.iter().enumerate() {
        let name = file(i);
        let shard: Vec<OutTensor> = rest.drain(..r.len()).collect();
        let bytes: u64 = sizes[r.clone()].iter().map(|&n| n as u64).sum();
        let bar = bar(&name, bytes);
        for t in &shard {
            t.array.eval().map_err(|e| anyhow!("computing {}: {}", t.name, e.msg))?;
            if let Some(b) = &bar {
                b.inc(t.array.nbytes() as u64);
            }
        }
        let path = dir.join(&name);
        let arrays: Vec<(&str, &Array)> = shard.iter().map(|t| (t.name.as_str(), &t.array)).collect();
        mlx::io::save_safetensors(&path, &arrays, &[("format", "mlx")])
            .map_err(|e| anyhow!("writing {}: {}", path.display(), e.msg))?;
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        for t in &shard {
            weight_map.insert(t.name.clone(), Value::String(name.clone()));
        }
    }
    let mut sorted: Vec<(String, Value)> = weight_map.into_iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let index = json!({
        "metadata": {"total_size": total, "total_parameters": params},
        "weight_map": Value::Object(sorted.into_iter().collect()),
    });
    let path = dir.join("model.safetensors.index.json");
    std::fs::write(&path, pretty(&index)).with_context(|| format!("writing {}", path.display()))?;
    Ok(Written { shards: count, bytes: total })
}

/// JSON as Python's `json.dump(indent=4)` lays it out.
pub fn pretty(v: &Value) -> String {
    use serde::Serialize;
    let mut out = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
    v.serialize(&mut ser).expect("JSON values serialize");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

fn bar(what: &str, bytes: u64) -> Option<ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let b = ProgressBar::new(bytes);
    b.set_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    b.set_message(what.to_string());
    Some(b)
}

#[cfg(test)]
mod tests {
    use super::plan;

    #[test]
    fn shards_split_as_mlx_lm() {
        assert_eq!(plan(&[4, 4, 4], 8), vec![0..2, 2..3]);
        // An oversized tensor gets a shard of its own.
        assert_eq!(plan(&[2, 20, 2], 8), vec![0..1, 1..2, 2..3]);
        assert_eq!(plan(&[], 8), Vec::<std::ops::Range<usize>>::new());
    }
}
