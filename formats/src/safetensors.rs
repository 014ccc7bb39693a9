//! The header of a safetensors file, checked against the file's size before
//! MLX reads it: every tensor has a dtype MLX reads, dimensions that fit
//! MLX's 32-bit shapes, and a byte range that matches its shape and lies
//! inside the file.
//!
//! Hand-written rather than through the `safetensors` crate: its checks
//! report a bad tensor without its name and know nothing of MLX's limits.

use crate::{Error, Result, MAX_DIM};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::Path;

/// Headers larger than this are refused (the bound the safetensors library uses).
pub const MAX_HEADER: u64 = 100_000_000;

/// One tensor of a header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorEntry {
    /// Its name.
    pub name: String,
    /// The safetensors dtype name (`BF16`, `U32`, ...).
    pub dtype: String,
    /// Its shape.
    pub shape: Vec<i32>,
    /// Where its bytes are, from the start of the data section.
    pub offsets: (u64, u64),
}

/// A checked header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The tensors, sorted by name.
    pub tensors: Vec<TensorEntry>,
    /// `__metadata__` (string keys and values).
    pub metadata: HashMap<String, String>,
    /// Where the data section starts, from the start of the file (the
    /// tensors' offsets count from here).
    pub data_start: u64,
}

/// The dtypes MLX's safetensors reader accepts, with their element sizes in bits.
fn dtype_bits(d: &str) -> Option<u64> {
    Some(match d {
        "BOOL" | "U8" | "I8" | "F8_E4M3" | "F8_E8M0" => 8,
        "U16" | "I16" | "F16" | "BF16" => 16,
        "U32" | "I32" | "F32" => 32,
        "U64" | "I64" | "C64" => 64,
        _ => return None,
    })
}

/// One entry of the header JSON as written.
#[derive(Deserialize)]
struct RawEntry {
    dtype: String,
    shape: Vec<u64>,
    data_offsets: (u64, u64),
}

/// Parses and checks a header: `head` is the file's first bytes (at least
/// the 8-byte length and the JSON it announces), `file_len` the whole file's
/// size.
pub fn check_header(head: &[u8], file_len: u64) -> Result<Header> {
    let Some(len_bytes) = head.get(..8) else {
        return Err(Error(format!("truncated: {} bytes, too short for a safetensors header", file_len)));
    };
    let n = u64::from_le_bytes(len_bytes.try_into().expect("8 bytes"));
    if n > MAX_HEADER || n > file_len.saturating_sub(8) {
        return Err(Error(format!(
            "truncated or not safetensors (it announces a header of {n} bytes in a {file_len}-byte file)"
        )));
    }
    let json = head
        .get(8..8 + n as usize)
        .ok_or_else(|| Error(format!("truncated header ({} of {n} bytes given)", head.len().saturating_sub(8))))?;
    let raw: BTreeMap<String, serde_json::Value> =
        serde_json::from_slice(json).map_err(|e| Error(format!("corrupt safetensors header: {e}")))?;
    let data_len = file_len - 8 - n;
    let mut tensors = Vec::new();
    let mut metadata = HashMap::new();
    for (name, v) in raw {
        if name == "__metadata__" {
            metadata = serde_json::from_value(v)
                .map_err(|e| Error(format!("corrupt safetensors header: __metadata__: {e}")))?;
            continue;
        }
        let info: RawEntry =
            serde_json::from_value(v).map_err(|e| Error(format!("corrupt safetensors header: tensor {name}: {e}")))?;
        let dtype = info.dtype;
        let bits =
            dtype_bits(&dtype).ok_or_else(|| Error(format!("tensor {name}: dtype {dtype} is not one MLX reads")))?;
        let mut shape = Vec::with_capacity(info.shape.len());
        let mut elements: u64 = 1;
        for &d in &info.shape {
            if d > MAX_DIM {
                return Err(Error(format!(
                    "tensor {name}: dimension {d} of shape {:?} is larger than MLX supports ({MAX_DIM})",
                    info.shape
                )));
            }
            shape.push(d as i32);
            elements = elements
                .checked_mul(d)
                .ok_or_else(|| Error(format!("tensor {name}: shape {:?} overflows", info.shape)))?;
        }
        let (begin, end) = info.data_offsets;
        let want = elements
            .checked_mul(bits)
            .map(|b| b / 8)
            .ok_or_else(|| Error(format!("tensor {name}: shape {:?} overflows", info.shape)))?;
        if end < begin || end - begin != want {
            return Err(Error(format!(
                "tensor {name}: data_offsets [{begin}, {end}] hold {} bytes, but {dtype} {:?} needs {want}",
                end.saturating_sub(begin),
                info.shape
            )));
        }
        if end > data_len {
            return Err(Error(format!(
                "truncated: tensor {name} needs bytes up to {}, the file has {file_len}",
                8 + n + end
            )));
        }
        tensors.push(TensorEntry { name, dtype, shape, offsets: (begin, end) });
    }
    Ok(Header { tensors, metadata, data_start: 8 + n })
}

/// The shard files a `model.safetensors.index.json` lists in its
/// `weight_map`, each a path inside the checkpoint folder: an absolute path
/// or one climbing out with `..` is refused, naming the tensor it is for.
pub fn index_shards(json: &[u8]) -> Result<Vec<String>> {
    let v: serde_json::Value = serde_json::from_slice(json).map_err(|e| Error(format!("invalid JSON: {e}")))?;
    let map =
        v.get("weight_map").and_then(|m| m.as_object()).ok_or_else(|| Error::new("missing field `weight_map`"))?;
    let mut files = std::collections::BTreeSet::new();
    for (tensor, f) in map {
        let f = f.as_str().ok_or_else(|| Error(format!("weight_map entry {tensor:?} is not a file name")))?;
        let p = Path::new(f);
        if f.is_empty() || !p.components().all(|c| matches!(c, std::path::Component::Normal(_))) {
            return Err(Error(format!(
                "weight_map entry {tensor:?}: shard path {f:?} leaves the checkpoint folder (only names inside it are allowed)"
            )));
        }
        files.insert(f.to_string());
    }
    Ok(files.into_iter().collect())
}

/// Reads and checks the header of the safetensors file at `path`. Errors
/// start with the path.
pub fn check_file(path: &Path) -> Result<Header> {
    let p = path.display();
    let (mut f, size) = crate::input::open_input(path).map_err(|e| Error(format!("{p}: cannot open: {e}")))?;
    let mut len = [0u8; 8];
    f.read_exact(&mut len).map_err(|_| Error(format!("{p}: truncated ({size} bytes, no safetensors header)")))?;
    let n = u64::from_le_bytes(len);
    let mut head = len.to_vec();
    if n <= MAX_HEADER && n <= size.saturating_sub(8) {
        head.resize(8 + n as usize, 0);
        f.read_exact(&mut head[8..]).map_err(|e| Error(format!("{p}: cannot read the header: {e}")))?;
    }
    check_header(&head, size).map_err(|e| Error(format!("{p}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(header: &str, data: usize) -> Vec<u8> {
        let mut v = (header.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(header.as_bytes());
        v.resize(v.len() + data, 0);
        v
    }

    fn check(header: &str, data: usize) -> Result<Header> {
        let f = file(header, data);
        check_header(&f, f.len() as u64)
    }

    #[test]
    fn a_good_header() {
        let h = check(
            r#"{"__metadata__":{"format":"mlx"},"b":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"a":{"dtype":"BF16","shape":[3],"data_offsets":[16,22]}}"#,
            22,
        )
        .unwrap();
        assert_eq!(h.tensors.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(h.tensors[1].shape, [2, 2]);
        assert_eq!(h.metadata["format"], "mlx");
    }

    #[test]
    fn a_dimension_past_32_bits_is_refused_not_cut() {
        let e = check(r#"{"w":{"dtype":"U8","shape":[4294967552],"data_offsets":[0,4294967552]}}"#, 16).unwrap_err();
        assert!(e.0.contains("tensor w") && e.0.contains("4294967552"), "{e}");
    }

    #[test]
    fn offsets_must_match_the_shape_and_fit_the_file() {
        let e = check(r#"{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,8]}}"#, 16).unwrap_err();
        assert!(e.0.contains("tensor w") && e.0.contains("needs 16"), "{e}");
        let e = check(r#"{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#, 8).unwrap_err();
        assert!(e.0.contains("truncated") && e.0.contains("tensor w"), "{e}");
        let e = check(r#"{"w":{"dtype":"F32","shape":[4],"data_offsets":[16,0]}}"#, 16).unwrap_err();
        assert!(e.0.contains("tensor w"), "{e}");
    }

    #[test]
    fn index_names_stay_inside_the_folder() {
        let ok = br#"{"weight_map": {"a": "model-1.safetensors", "b": "sub/model-2.safetensors", "c": "model-1.safetensors"}}"#;
        assert_eq!(index_shards(ok).unwrap(), ["model-1.safetensors", "sub/model-2.safetensors"]);
        for bad in ["../../../../etc/passwd", "/etc/passwd", "a/../../b", ""] {
            let j = format!(r#"{{"weight_map": {{"w": {bad:?}}}}}"#);
            let e = index_shards(j.as_bytes()).unwrap_err().0;
            assert!(e.contains("\"w\"") && e.contains("leaves the checkpoint folder"), "{bad}: {e}");
        }
        assert!(index_shards(b"{}").unwrap_err().0.contains("weight_map"));
        assert!(index_shards(br#"{"weight_map": {"w": 3}}"#).unwrap_err().0.contains("not a file name"));
    }

    #[test]
    fn bad_lengths_and_json() {
        let mut f = (1u64 << 40).to_le_bytes().to_vec();
        f.extend_from_slice(b"{}");
        let e = check_header(&f, f.len() as u64).unwrap_err();
        assert!(e.0.contains("1099511627776"), "{e}");
        assert!(check_header(b"abc", 3).unwrap_err().0.contains("truncated"));
        assert!(check("{not json", 0).unwrap_err().0.contains("corrupt"));
        let e = check(r#"{"w":{"dtype":"F6_E2M3","shape":[4],"data_offsets":[0,3]}}"#, 3).unwrap_err();
        assert!(e.0.contains("not one MLX reads"), "{e}");
    }
}
