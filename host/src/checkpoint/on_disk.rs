//! Where each safetensors tensor's bytes lie, so a rank of a split model
//! reads only its share of a tensor from disk instead of all of it (MLX's
//! lazy load reads a tensor whole before any slice of it is taken).

use anyhow::{anyhow, Context, Result};
use famlx_formats::safetensors::Header;
use mlx::{Array, Dtype};
use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// One tensor in a safetensors file.
#[derive(Debug, Clone, PartialEq)]
pub struct OnDisk {
    /// The file.
    pub path: PathBuf,
    /// Its first byte, from the start of the file.
    pub start: u64,
    /// Element type.
    pub dtype: Dtype,
    /// Shape.
    pub shape: Vec<i32>,
}

/// The MLX type of a safetensors dtype name, for the types a share is read
/// of (the rest are read whole by MLX).
fn dtype_of(name: &str) -> Option<Dtype> {
    Some(match name {
        "F32" => Dtype::F32,
        "F16" => Dtype::F16,
        "BF16" => Dtype::BF16,
        "U32" => Dtype::U32,
        "I32" => Dtype::I32,
        "U8" => Dtype::U8,
        "I8" => Dtype::I8,
        "U16" => Dtype::U16,
        "I16" => Dtype::I16,
        _ => return None,
    })
}

/// Every tensor of a checked header of the file at `path`, by name.
pub fn index(path: &Path, header: &Header) -> HashMap<String, OnDisk> {
    header
        .tensors
        .iter()
        .filter_map(|t| {
            let on = OnDisk {
                path: path.to_path_buf(),
                start: header.data_start + t.offsets.0,
                dtype: dtype_of(&t.dtype)?,
                shape: t.shape.clone(),
            };
            Some((t.name.clone(), on))
        })
        .collect()
}

impl OnDisk {
    /// Elements `[start, stop)` along `axis`, read from the file alone:
    /// one read per run of contiguous bytes.
    pub fn read_slice(&self, axis: i32, start: i32, stop: i32) -> Result<Array> {
        let nd = self.shape.len() as i32;
        let ax = if axis < 0 { axis + nd } else { axis };
        if ax < 0 || ax >= nd || start < 0 || stop > self.shape[ax as usize] || start >= stop {
            return Err(anyhow!(
                "{}: cannot take [{start}, {stop}) of axis {axis} of a tensor of shape {:?}",
                self.path.display(),
                self.shape
            ));
        }
        let ax = ax as usize;
        let elem = self.dtype.size() as u64;
        let outer: u64 = self.shape[..ax].iter().map(|&d| d as u64).product();
        let inner: u64 = self.shape[ax + 1..].iter().map(|&d| d as u64).product::<u64>() * elem;
        let (run, stride) = ((stop - start) as u64 * inner, self.shape[ax] as u64 * inner);
        let mut bytes = vec![0u8; (outer * run) as usize];
        let (f, _) = famlx_formats::input::open_input(&self.path)
            .with_context(|| format!("{}: cannot open", self.path.display()))?;
        for (o, chunk) in bytes.chunks_mut(run as usize).enumerate() {
            let at = self.start + o as u64 * stride + start as u64 * inner;
            f.read_exact_at(chunk, at).with_context(|| format!("{}: cannot read at byte {at}", self.path.display()))?;
        }
        let mut shape = self.shape.clone();
        shape[ax] = stop - start;
        Ok(Array::from_bytes(&bytes, &shape, self.dtype)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_read_alone_equals_the_slice_of_the_whole() {
        let dir = std::env::temp_dir().join(format!("famlx-on-disk-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("t.safetensors");
        let vals: Vec<f32> = (0..48).map(|i| i as f32 * 0.5 - 3.0).collect();
        let a = Array::from_slice(&vals[..24], &[4, 6]).unwrap();
        let b = Array::from_slice(&vals, &[2, 3, 8]).unwrap().astype(Dtype::BF16).unwrap();
        mlx::io::save_safetensors(&f, &[("a", &a), ("b", &b)], &[("format", "mlx")]).unwrap();
        let header = famlx_formats::safetensors::check_file(&f).unwrap();
        let idx = index(&f, &header);
        let same = |name: &str, whole: &Array, axis: i32, s: i32, e: i32| {
            let part = idx[name].read_slice(axis, s, e).unwrap();
            let want = whole.slice_axis(axis, s, e).unwrap();
            assert_eq!(part.shape(), want.shape(), "{name} axis {axis} [{s}, {e})");
            assert_eq!(part.dtype(), want.dtype());
            let (p, w) = (part.astype(Dtype::F32).unwrap(), want.astype(Dtype::F32).unwrap());
            assert_eq!(p.to_vec::<f32>().unwrap(), w.to_vec::<f32>().unwrap(), "{name} axis {axis} [{s}, {e})");
        };
        same("a", &a, 0, 1, 3);
        same("a", &a, 1, 2, 6);
        same("a", &a, -1, 0, 1);
        same("b", &b, 1, 1, 3);
        same("b", &b, 2, 4, 8);
        same("b", &b, 0, 1, 2);
        let e = idx["a"].read_slice(1, 3, 9).unwrap_err().to_string();
        assert!(e.contains("cannot take [3, 9) of axis 1"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
