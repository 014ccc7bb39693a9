//! GGUF, llama.cpp's single-file checkpoint format (versions 2 and 3,
//! little-endian).
//!
//! [`parse`] reads the header, the metadata and the tensor table from the
//! file's bytes and checks all of it against the file's length: every count,
//! string and array length must fit in the bytes that are left, every tensor
//! has at most four dimensions that MLX can index, a known type whose blocks
//! its first dimension fills, an aligned offset, and data that ends inside
//! the file. Nothing is allocated from a length before that length has been
//! checked against the file, so a hostile header gives an error, never a
//! crash or a huge allocation. [`Gguf::open`] maps a file read-only (a
//! shared, read-only model cache works) and parses it; [`Gguf::decode`]
//! turns one tensor's bytes into what MLX holds.

pub mod affine;
mod blocks;
mod decode;
mod split;
mod types;
pub mod write;

pub use affine::{AffineForm, ScaleType, Triple, GROUP};
pub use decode::Decoded;
pub use split::{part_name, split_name};
pub use types::{GgmlType, PlainDtype, TensorInfo};

use crate::{Error, Result, MAX_DIM};
use std::collections::HashMap;
use std::path::Path;

/// One metadata value. Scalars come as one-element `Ints` / `Floats`; bool
/// arrays come as `Ints` of 0/1.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    /// A string.
    Str(String),
    /// An array of strings.
    Strs(Vec<String>),
    /// An integer or an array of integers (any GGUF integer width).
    Ints(Vec<i64>),
    /// A float or an array of floats.
    Floats(Vec<f64>),
    /// A boolean.
    Bool(bool),
}

/// A parsed GGUF file: its metadata and tensor table (checked against its
/// length), with the bytes the tensors live in.
pub struct Gguf {
    bytes: Bytes,
    /// Format version (2 or 3).
    pub version: u32,
    /// Metadata by key.
    pub metadata: HashMap<String, MetaValue>,
    /// Tensor table, in file order.
    pub tensors: Vec<TensorInfo>,
}

enum Bytes {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Bytes {
    fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

/// The layout [`parse`] reads from a GGUF file's bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    /// Format version (2 or 3).
    pub version: u32,
    /// Metadata by key.
    pub metadata: HashMap<String, MetaValue>,
    /// Tensor table, in file order.
    pub tensors: Vec<TensorInfo>,
}

impl Gguf {
    /// Maps `path` read-only and parses it. Errors start with the path.
    pub fn open(path: &Path) -> Result<Gguf> {
        let p = path.display();
        let (file, len) = crate::input::open_input(path).map_err(|e| Error(format!("{p}: cannot open: {e}")))?;
        if len == 0 {
            return Err(Error(format!("{p}: empty file (0 bytes), not a GGUF model")));
        }
        // SAFETY: the map is read-only and private to this process; as with
        // every mmap-based model loader, a file truncated by another process
        // while mapped is outside what this guards against.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error(format!("{p}: cannot map: {e}")))?;
        Self::from_bytes(Bytes::Mapped(map)).map_err(|e| Error(format!("{p}: {e}")))
    }

    /// Parses a GGUF file held in memory.
    pub fn from_vec(bytes: Vec<u8>) -> Result<Gguf> {
        Self::from_bytes(Bytes::Owned(bytes))
    }

    fn from_bytes(bytes: Bytes) -> Result<Gguf> {
        let Layout { version, metadata, tensors } = parse(bytes.as_slice())?;
        Ok(Gguf { bytes, version, metadata, tensors })
    }

    /// The raw bytes of tensor `t` (`None` when its type cannot be sized).
    pub fn data(&self, t: &TensorInfo) -> Option<&[u8]> {
        let n = t.nbytes?;
        // Checked to lie inside the file by `parse`.
        Some(&self.bytes.as_slice()[t.start as usize..(t.start + n) as usize])
    }

    /// Decodes tensor `t` into what MLX holds (see [`Decoded`]).
    pub fn decode(&self, t: &TensorInfo) -> Result<Decoded<'_>> {
        let data = self.data(t).ok_or_else(|| unsupported(t))?;
        decode::decode(t, data).map_err(|e| Error(format!("tensor {}: {e}", t.name)))
    }

    /// Tells the OS that tensor `t`'s mapped pages are not needed any more
    /// (its data was copied out): a file read tensor by tensor does not stay
    /// resident beside its copy. The pages come back from the file if touched
    /// again; an in-memory file is left alone.
    pub fn release(&self, t: &TensorInfo) {
        if let (Bytes::Mapped(m), Some(n)) = (&self.bytes, t.nbytes) {
            // SAFETY: the mapping is a read-only, shared file mapping, so
            // MADV_DONTNEED drops clean pages that are re-read from the file
            // on the next access: no content any reference sees changes.
            #[cfg(unix)]
            let _ =
                unsafe { m.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, t.start as usize, n as usize) };
        }
    }
}

fn unsupported(t: &TensorInfo) -> Error {
    Error(format!(
        "tensor {} has GGUF type {}, which famlx cannot read (supported: {})",
        t.name,
        t.ggml_type.name(),
        GgmlType::supported_names()
    ))
}

/// Value types of the metadata section.
const T_U8: u32 = 0;
const T_I8: u32 = 1;
const T_U16: u32 = 2;
const T_I16: u32 = 3;
const T_U32: u32 = 4;
const T_I32: u32 = 5;
const T_F32: u32 = 6;
const T_BOOL: u32 = 7;
const T_STRING: u32 = 8;
const T_ARRAY: u32 = 9;
const T_U64: u32 = 10;
const T_I64: u32 = 11;
const T_F64: u32 = 12;

/// Arrays of arrays are read through (and dropped) up to this depth.
const MAX_NESTING: u32 = 4;
/// The most dimensions a GGML tensor has.
const MAX_DIMS: u32 = 4;
/// Alignment of the data section when `general.alignment` is absent.
const DEFAULT_ALIGNMENT: u64 = 32;

/// Parses and checks a whole GGUF file (see the module documentation).
pub fn parse(bytes: &[u8]) -> Result<Layout> {
    if bytes.is_empty() {
        return Err(Error::new("empty file (0 bytes), not a GGUF model"));
    }
    let mut r = Reader { b: bytes, pos: 0 };
    let magic = r.take(4).map_err(|_| Error(format!("not a GGUF file (only {} bytes)", bytes.len())))?;
    if magic != b"GGUF" {
        return Err(Error(format!(
            "not a GGUF file (it starts with {:?}, not \"GGUF\")",
            String::from_utf8_lossy(magic)
        )));
    }
    let version = r.u32().map_err(|e| e.context("version"))?;
    if !(2..=3).contains(&version) {
        let hint = if version.swap_bytes() <= 3 { " (a big-endian file?)" } else { "" };
        return Err(Error(format!("unsupported GGUF version {version}{hint}; famlx reads versions 2 and 3")));
    }
    let n_tensors = r.u64().map_err(|e| e.context("tensor count"))?;
    let n_kv = r.u64().map_err(|e| e.context("metadata count"))?;
    // The smallest metadata entry: key length, value type, one byte of value.
    if n_kv > r.left() as u64 / 13 {
        return Err(Error(format!(
            "bad GGUF header: it claims {n_kv} metadata entries, more than the file's {} bytes can hold",
            bytes.len()
        )));
    }
    // The smallest tensor entry: name length, dimension count, type, offset.
    if n_tensors > r.left() as u64 / 24 {
        return Err(Error(format!(
            "bad GGUF header: it claims {n_tensors} tensors, more than the file's {} bytes can describe",
            bytes.len()
        )));
    }
    let mut metadata = HashMap::with_capacity(n_kv as usize);
    for i in 0..n_kv {
        let key = r.string().map_err(|e| e.context(&format!("metadata key {i}")))?;
        let ty = r.u32().map_err(|e| e.context(&format!("metadata {key}")))?;
        let value = r.value(ty, 0).map_err(|e| e.context(&format!("metadata {key}")))?;
        if metadata.contains_key(&key) {
            return Err(Error(format!("metadata key {key} appears twice")));
        }
        if let Some(v) = value {
            metadata.insert(key, v);
        }
    }
    let alignment = match metadata.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(MetaValue::Ints(v)) if v.len() == 1 && v[0] > 0 && (v[0] as u64).is_power_of_two() => v[0] as u64,
        Some(other) => {
            return Err(Error(format!("metadata general.alignment: {other:?} is not a positive power of two")));
        }
    };
    let mut tensors = Vec::with_capacity(n_tensors as usize);
    let mut names = std::collections::HashSet::with_capacity(n_tensors as usize);
    for i in 0..n_tensors {
        let name = r.string().map_err(|e| e.context(&format!("tensor {i} name")))?;
        let t = r.tensor_info(name).map_err(|e| e.context(&format!("tensor {i}")))?;
        if !names.insert(t.0.clone()) {
            return Err(Error(format!("tensor {} appears twice", t.0)));
        }
        tensors.push(t);
    }
    // Tensor data starts at the first aligned position after the table.
    let data_start = (r.pos as u64).div_ceil(alignment).saturating_mul(alignment);
    let len = bytes.len() as u64;
    let mut out = Vec::with_capacity(tensors.len());
    for (name, dims, ggml_type, offset) in tensors {
        if offset % alignment != 0 {
            return Err(Error(format!(
                "tensor {name}: data offset {offset} is not a multiple of the alignment {alignment}"
            )));
        }
        let start = data_start
            .checked_add(offset)
            .ok_or_else(|| Error(format!("tensor {name}: data offset {offset} is out of range")))?;
        let nbytes = ggml_type.nbytes(&dims).map_err(|e| Error(format!("tensor {name}: {e}")))?;
        if let Some(n) = nbytes {
            let end = start.saturating_add(n);
            if end > len {
                return Err(Error(format!(
                    "tensor {name}: its data (bytes {start}..{end}) lies past the end of the file ({len} bytes): \
                     truncated or corrupt download?"
                )));
            }
        }
        out.push(TensorInfo { name, dims, ggml_type, start, nbytes });
    }
    Ok(Layout { version, metadata, tensors: out })
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl Error {
    fn context(self, what: &str) -> Error {
        Error(format!("bad GGUF header at {what}: {}", self.0))
    }
}

type Entry = (String, Vec<u64>, GgmlType, u64);

impl<'a> Reader<'a> {
    fn left(&self) -> usize {
        self.b.len() - self.pos
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.left() {
            return Err(Error(format!(
                "truncated: needs {n} more bytes at offset {}, the file has {}",
                self.pos,
                self.left()
            )));
        }
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn arr<const N: usize>(&mut self) -> Result<[u8; N]> {
        Ok(self.take(N)?.try_into().expect("took N bytes"))
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.arr()?))
    }

    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.arr()?))
    }

    /// A length-prefixed byte string, its length checked against the file.
    fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.u64()?;
        if n > self.left() as u64 {
            return Err(Error(format!("a string of {n} bytes does not fit in the {} bytes left", self.left())));
        }
        self.take(n as usize)
    }

    fn string(&mut self) -> Result<String> {
        // llama.cpp vocabularies occasionally hold invalid UTF-8: keep it, lossily.
        Ok(String::from_utf8_lossy(self.bytes()?).into_owned())
    }

    /// A value of type `ty`; `None` for arrays of arrays (read through, dropped).
    fn value(&mut self, ty: u32, depth: u32) -> Result<Option<MetaValue>> {
        if ty == T_ARRAY {
            return self.array(depth);
        }
        Ok(Some(match self.scalar(ty)? {
            Scalar::I(i) => MetaValue::Ints(vec![i]),
            Scalar::F(f) => MetaValue::Floats(vec![f]),
            Scalar::B(b) => MetaValue::Bool(b),
            Scalar::S(s) => MetaValue::Str(s),
        }))
    }

    fn scalar(&mut self, ty: u32) -> Result<Scalar> {
        Ok(match ty {
            T_U8 => Scalar::I(self.arr::<1>()?[0] as i64),
            T_I8 => Scalar::I(i8::from_le_bytes(self.arr()?) as i64),
            T_U16 => Scalar::I(u16::from_le_bytes(self.arr()?) as i64),
            T_I16 => Scalar::I(i16::from_le_bytes(self.arr()?) as i64),
            T_U32 => Scalar::I(u32::from_le_bytes(self.arr()?) as i64),
            T_I32 => Scalar::I(i32::from_le_bytes(self.arr()?) as i64),
            T_F32 => Scalar::F(f32::from_le_bytes(self.arr()?) as f64),
            T_BOOL => Scalar::B(self.arr::<1>()?[0] != 0),
            T_STRING => Scalar::S(self.string()?),
            T_U64 => Scalar::I(u64::from_le_bytes(self.arr()?) as i64),
            T_I64 => Scalar::I(i64::from_le_bytes(self.arr()?)),
            T_F64 => Scalar::F(f64::from_le_bytes(self.arr()?)),
            t => return Err(Error(format!("unknown value type {t}"))),
        })
    }

    fn array(&mut self, depth: u32) -> Result<Option<MetaValue>> {
        let elem = self.u32()?;
        let n = self.u64()?;
        // The smallest encoding of one element, to bound `n` by the file.
        let min = match elem {
            T_U8 | T_I8 | T_BOOL => 1,
            T_U16 | T_I16 => 2,
            T_U32 | T_I32 | T_F32 => 4,
            T_U64 | T_I64 | T_F64 | T_STRING => 8,
            T_ARRAY => 12,
            t => return Err(Error(format!("array of unknown value type {t}"))),
        };
        if n > (self.left() / min) as u64 {
            return Err(Error(format!("an array of {n} elements does not fit in the {} bytes left", self.left())));
        }
        if elem == T_ARRAY {
            if depth >= MAX_NESTING {
                return Err(Error(format!("arrays nested more than {MAX_NESTING} deep")));
            }
            for _ in 0..n {
                self.array(depth + 1)?;
            }
            return Ok(None);
        }
        let n = n as usize;
        Ok(Some(match elem {
            T_STRING => MetaValue::Strs((0..n).map(|_| self.string()).collect::<Result<_>>()?),
            T_F32 | T_F64 => MetaValue::Floats(
                (0..n)
                    .map(|_| match self.scalar(elem)? {
                        Scalar::F(f) => Ok(f),
                        _ => unreachable!("float types give floats"),
                    })
                    .collect::<Result<_>>()?,
            ),
            _ => MetaValue::Ints(
                (0..n)
                    .map(|_| match self.scalar(elem)? {
                        Scalar::I(i) => Ok(i),
                        Scalar::B(b) => Ok(b as i64),
                        _ => unreachable!("integer types give integers"),
                    })
                    .collect::<Result<_>>()?,
            ),
        }))
    }

    fn tensor_info(&mut self, name: String) -> Result<Entry> {
        let n_dims = self.u32()?;
        if n_dims > MAX_DIMS {
            return Err(Error(format!("{name}: {n_dims} dimensions (GGUF tensors have at most {MAX_DIMS})")));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            let d = self.u64()?;
            if d > MAX_DIM {
                return Err(Error(format!("{name}: dimension {d} is larger than MLX supports ({MAX_DIM})")));
            }
            dims.push(d);
        }
        let ty = self.u32()?;
        let ggml_type = GgmlType::from_id(ty).ok_or_else(|| Error(format!("{name}: unknown GGUF tensor type {ty}")))?;
        let offset = self.u64()?;
        Ok((name, dims, ggml_type, offset))
    }
}

enum Scalar {
    I(i64),
    F(f64),
    B(bool),
    S(String),
}

#[cfg(test)]
mod tests;
