//! A minimal GGUF writer, for tests and tools that need small files (and
//! hostile ones, built by patching what it writes).

use super::{GgmlType, MetaValue};

/// Builds a version-3 GGUF file in memory.
#[derive(Debug, Default, Clone)]
pub struct Writer {
    metadata: Vec<(String, MetaValue)>,
    tensors: Vec<(String, Vec<u64>, GgmlType, Vec<u8>)>,
}

const ALIGN: usize = 32;

impl Writer {
    /// An empty file.
    pub fn new() -> Writer {
        Writer::default()
    }

    /// Adds a metadata entry. One-element `Ints` are written as `i32` when
    /// they fit (as llama.cpp writes most counts), `Floats` as `f32`.
    pub fn meta(&mut self, key: &str, v: MetaValue) -> &mut Writer {
        self.metadata.push((key.to_string(), v));
        self
    }

    /// Adds a tensor: `dims` in GGML order, `data` its encoded bytes.
    pub fn tensor(&mut self, name: &str, dims: &[u64], ty: GgmlType, data: Vec<u8>) -> &mut Writer {
        self.tensors.push((name.to_string(), dims.to_vec(), ty, data));
        self
    }

    /// The file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(b"GGUF");
        b.extend_from_slice(&3u32.to_le_bytes());
        b.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        b.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (k, v) in &self.metadata {
            string(&mut b, k);
            value(&mut b, v);
        }
        let mut offset = 0usize;
        let mut offsets = Vec::new();
        for (name, dims, ty, data) in &self.tensors {
            string(&mut b, name);
            b.extend_from_slice(&(dims.len() as u32).to_le_bytes());
            for d in dims {
                b.extend_from_slice(&d.to_le_bytes());
            }
            b.extend_from_slice(&ty.id().to_le_bytes());
            b.extend_from_slice(&(offset as u64).to_le_bytes());
            offsets.push(offset);
            offset += data.len().div_ceil(ALIGN) * ALIGN;
        }
        b.resize(b.len().div_ceil(ALIGN) * ALIGN, 0);
        let start = b.len();
        for ((_, _, _, data), off) in self.tensors.iter().zip(offsets) {
            b.resize(start + off, 0);
            b.extend_from_slice(data);
        }
        b
    }
}

fn string(b: &mut Vec<u8>, s: &str) {
    b.extend_from_slice(&(s.len() as u64).to_le_bytes());
    b.extend_from_slice(s.as_bytes());
}

fn value(b: &mut Vec<u8>, v: &MetaValue) {
    match v {
        MetaValue::Str(s) => {
            b.extend_from_slice(&8u32.to_le_bytes());
            string(b, s);
        }
        MetaValue::Bool(x) => {
            b.extend_from_slice(&7u32.to_le_bytes());
            b.push(*x as u8);
        }
        MetaValue::Ints(v) if v.len() == 1 => int(b, v[0]),
        MetaValue::Floats(v) if v.len() == 1 => {
            b.extend_from_slice(&6u32.to_le_bytes());
            b.extend_from_slice(&(v[0] as f32).to_le_bytes());
        }
        MetaValue::Ints(v) => {
            b.extend_from_slice(&9u32.to_le_bytes());
            b.extend_from_slice(&5u32.to_le_bytes());
            b.extend_from_slice(&(v.len() as u64).to_le_bytes());
            for &x in v {
                b.extend_from_slice(&(x as i32).to_le_bytes());
            }
        }
        MetaValue::Floats(v) => {
            b.extend_from_slice(&9u32.to_le_bytes());
            b.extend_from_slice(&6u32.to_le_bytes());
            b.extend_from_slice(&(v.len() as u64).to_le_bytes());
            for &x in v {
                b.extend_from_slice(&(x as f32).to_le_bytes());
            }
        }
        MetaValue::Strs(v) => {
            b.extend_from_slice(&9u32.to_le_bytes());
            b.extend_from_slice(&8u32.to_le_bytes());
            b.extend_from_slice(&(v.len() as u64).to_le_bytes());
            for s in v {
                string(b, s);
            }
        }
    }
}

fn int(b: &mut Vec<u8>, x: i64) {
    match i32::try_from(x) {
        Ok(i) => {
            b.extend_from_slice(&5u32.to_le_bytes());
            b.extend_from_slice(&i.to_le_bytes());
        }
        Err(_) => {
            b.extend_from_slice(&11u32.to_le_bytes());
            b.extend_from_slice(&x.to_le_bytes());
        }
    }
}
