//! Reading and writing tensors: safetensors (with metadata) and GGUF.

use crate::{check, out1, Array, Error, Result};
use mlx_sys as sys;
use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::path::Path;

/// A GGUF metadata value as MLX decodes it.
#[derive(Debug, Clone)]
pub enum GgufValue {
    /// A string.
    Str(String),
    /// Numbers (scalars are 0-d arrays).
    Array(Array),
    /// A list of strings (e.g. the tokenizer vocabulary).
    Strs(Vec<String>),
    /// Something MLX does not decode.
    None,
}

struct Tensors(sys::mlxs_tensors);

impl Drop for Tensors {
    fn drop(&mut self) {
        unsafe { sys::mlxs_tensors_free(self.0) }
    }
}

fn cstr(p: *const std::ffi::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn path_c(path: &Path) -> Result<CString> {
    CString::new(path.to_string_lossy().as_bytes()).map_err(|_| Error::msg(format!("{}: bad path", path.display())))
}

impl Tensors {
    fn arrays(&self) -> Result<HashMap<String, Array>> {
        let n = unsafe { sys::mlxs_tensors_len(self.0) };
        let mut m = HashMap::with_capacity(n);
        for i in 0..n {
            let name = cstr(unsafe { sys::mlxs_tensors_name(self.0, i) });
            let a = out1(|o| unsafe { sys::mlxs_tensors_array(self.0, i, o) })?;
            m.insert(name, a);
        }
        Ok(m)
    }
}

/// Loads a safetensors file: tensors (lazily read) and string metadata.
pub fn load_safetensors(path: &Path) -> Result<(HashMap<String, Array>, HashMap<String, String>)> {
    let p = path_c(path)?;
    let mut t = std::ptr::null_mut();
    check(unsafe { sys::mlxs_load_safetensors(p.as_ptr(), &mut t) })
        .map_err(|e| Error { msg: format!("{}: {}", path.display(), e.msg), ..e })?;
    let t = Tensors(t);
    let arrays = t.arrays()?;
    let n = unsafe { sys::mlxs_tensors_meta_len(t.0) };
    let mut meta = HashMap::new();
    for i in 0..n {
        let k = cstr(unsafe { sys::mlxs_tensors_meta_key(t.0, i) });
        let v = cstr(unsafe { sys::mlxs_tensors_meta_str(t.0, i) });
        meta.insert(k, v);
    }
    Ok((arrays, meta))
}

/// Saves tensors and string metadata as safetensors.
pub fn save_safetensors(path: &Path, arrays: &[(&str, &Array)], meta: &[(&str, &str)]) -> Result<()> {
    let p = path_c(path)?;
    let to_c = |s: &str| CString::new(s).map_err(|_| Error::msg(format!("bad name {s:?}")));
    let names: Vec<CString> = arrays.iter().map(|(n, _)| to_c(n)).collect::<Result<_>>()?;
    let name_ptrs: Vec<_> = names.iter().map(|c| c.as_ptr()).collect();
    let raws: Vec<_> = arrays.iter().map(|(_, a)| a.as_raw()).collect();
    let mk: Vec<CString> = meta.iter().map(|(k, _)| to_c(k)).collect::<Result<_>>()?;
    let mv: Vec<CString> = meta.iter().map(|(_, v)| to_c(v)).collect::<Result<_>>()?;
    let mkp: Vec<_> = mk.iter().map(|c| c.as_ptr()).collect();
    let mvp: Vec<_> = mv.iter().map(|c| c.as_ptr()).collect();
    check(unsafe {
        sys::mlxs_save_safetensors(
            p.as_ptr(),
            name_ptrs.as_ptr(),
            raws.as_ptr(),
            raws.len(),
            mkp.as_ptr(),
            mvp.as_ptr(),
            mkp.len(),
        )
    })
    .map_err(|e| Error { msg: format!("{}: {}", path.display(), e.msg), ..e })
}

/// Loads a GGUF file: tensors (quantized ones as MLX affine triples named
/// `x.weight`, `x.scales`, `x.biases`) and the metadata.
pub fn load_gguf(path: &Path) -> Result<(HashMap<String, Array>, HashMap<String, GgufValue>)> {
    let p = path_c(path)?;
    let mut t = std::ptr::null_mut();
    check(unsafe { sys::mlxs_load_gguf(p.as_ptr(), &mut t) })
        .map_err(|e| Error { msg: format!("{}: {}", path.display(), e.msg), ..e })?;
    let t = Tensors(t);
    let arrays = t.arrays()?;
    let n = unsafe { sys::mlxs_tensors_meta_len(t.0) };
    let mut meta = HashMap::new();
    for i in 0..n {
        let k = cstr(unsafe { sys::mlxs_tensors_meta_key(t.0, i) });
        let v = match unsafe { sys::mlxs_tensors_meta_kind(t.0, i) } {
            0 => GgufValue::Str(cstr(unsafe { sys::mlxs_tensors_meta_str(t.0, i) })),
            1 => GgufValue::Array(out1(|o| unsafe { sys::mlxs_tensors_meta_array(t.0, i, o) })?),
            2 => {
                let len = unsafe { sys::mlxs_tensors_meta_strs_len(t.0, i) };
                GgufValue::Strs((0..len).map(|j| cstr(unsafe { sys::mlxs_tensors_meta_strs_at(t.0, i, j) })).collect())
            }
            _ => GgufValue::None,
        };
        meta.insert(k, v);
    }
    Ok((arrays, meta))
}
