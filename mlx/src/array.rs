//! The array handle.

use crate::dtype::Dtype;
use crate::dtype::Element;
use crate::error::{check, Error, Result};
use mlx_sys as sys;
use std::fmt;

/// A lazily evaluated MLX array. Cloning shares the same graph node (cheap);
/// dropping releases this reference.
///
/// `#[repr(transparent)]` over the shim's pointer, so a handle can cross a
/// plugin boundary as a plain pointer (see [`Array::into_raw`]).
#[repr(transparent)]
pub struct Array {
    raw: sys::mlxs_array,
}

// SAFETY: an mlx::core::array is a reference-counted handle; MLX allows moving
// arrays between threads (graph building is not shared concurrently here).
unsafe impl Send for Array {}

impl Drop for Array {
    fn drop(&mut self) {
        // SAFETY: we own this handle.
        unsafe { sys::mlxs_array_free(self.raw) }
    }
}

impl Clone for Array {
    fn clone(&self) -> Self {
        let mut out = std::ptr::null_mut();
        // SAFETY: valid handle; cloning an mlx::core::array cannot fail short of OOM.
        let rc = unsafe { sys::mlxs_array_clone(self.raw, &mut out) };
        assert_eq!(rc, 0, "cloning an array handle failed");
        Array { raw: out }
    }
}

impl fmt::Debug for Array {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Array({:?}, {})", self.shape(), self.dtype())
    }
}

impl Array {
    /// Takes ownership of a raw shim handle.
    ///
    /// # Safety
    /// `raw` must be a live handle from the shim that nobody else frees.
    pub unsafe fn from_raw(raw: sys::mlxs_array) -> Array {
        Array { raw }
    }

    /// Gives up ownership of the raw handle (free it with [`Array::from_raw`]).
    pub fn into_raw(self) -> sys::mlxs_array {
        let r = self.raw;
        std::mem::forget(self);
        r
    }

    /// The raw handle, still owned by `self`.
    pub fn as_raw(&self) -> sys::mlxs_array {
        self.raw
    }

    /// An array from host data with the given shape.
    pub fn from_slice<T: Element>(data: &[T], shape: &[i32]) -> Result<Array> {
        let n: i64 = shape.iter().map(|&d| d as i64).product();
        if n != data.len() as i64 {
            return Err(Error::msg(format!("from_slice: {} elements for shape {:?}", data.len(), shape)));
        }
        out1(|o| unsafe {
            sys::mlxs_array_from_data(data.as_ptr().cast(), shape.as_ptr(), shape.len(), T::DTYPE as i32, o)
        })
    }

    /// An array from the little-endian bytes of `dtype` elements (e.g. a
    /// tensor's data in a mapped file); `bytes` may have any alignment.
    pub fn from_bytes(bytes: &[u8], shape: &[i32], dtype: Dtype) -> Result<Array> {
        let n: i64 = shape.iter().map(|&d| d as i64).product();
        if n.checked_mul(dtype.size() as i64) != Some(bytes.len() as i64) {
            return Err(Error::msg(format!("from_bytes: {} bytes for {dtype} {shape:?}", bytes.len())));
        }
        // MLX copies element-wise through a typed pointer: give it an aligned copy
        // when the source is not aligned for the element type.
        let mut words: Vec<u64> = Vec::new();
        let data: *const u8 = if (bytes.as_ptr() as usize).is_multiple_of(dtype.size().max(1)) {
            bytes.as_ptr()
        } else {
            // u64 words are aligned for every MLX element type.
            words.resize(bytes.len().div_ceil(8), 0);
            // SAFETY: `words` holds at least `bytes.len()` bytes and does not overlap `bytes`.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), words.as_mut_ptr().cast::<u8>(), bytes.len()) };
            words.as_ptr().cast()
        };
        out1(|o| unsafe { sys::mlxs_array_from_data(data.cast(), shape.as_ptr(), shape.len(), dtype as i32, o) })
    }

    /// A scalar of the given dtype.
    pub fn scalar_f(v: f64, dtype: Dtype) -> Result<Array> {
        out1(|o| unsafe { sys::mlxs_array_from_f64(v, dtype as i32, o) })
    }

    /// An integer scalar of the given dtype.
    pub fn scalar_i(v: i64, dtype: Dtype) -> Result<Array> {
        out1(|o| unsafe { sys::mlxs_array_from_i64(v, dtype as i32, o) })
    }

    /// A float32 scalar.
    pub fn f32(v: f32) -> Array {
        Self::scalar_f(v as f64, Dtype::F32).expect("scalar")
    }

    /// An int32 scalar.
    pub fn i32(v: i32) -> Array {
        Self::scalar_i(v as i64, Dtype::I32).expect("scalar")
    }

    /// A scalar with this array's dtype (keeps bf16 math in bf16, like a
    /// Python scalar does in MLX).
    pub fn scalar_like(&self, v: f64) -> Result<Array> {
        Self::scalar_f(v, self.dtype())
    }

    /// Number of dimensions.
    pub fn ndim(&self) -> usize {
        unsafe { sys::mlxs_array_ndim(self.raw) }
    }

    /// The shape.
    pub fn shape(&self) -> &[i32] {
        let n = self.ndim();
        if n == 0 {
            return &[];
        }
        // SAFETY: MLX keeps the shape alive as long as the array.
        unsafe { std::slice::from_raw_parts(sys::mlxs_array_shape(self.raw), n) }
    }

    /// Size of one dimension (negative counts from the end).
    pub fn dim(&self, axis: i32) -> i32 {
        let s = self.shape();
        let a = if axis < 0 { s.len() as i32 + axis } else { axis };
        s[a as usize]
    }

    /// Element type.
    pub fn dtype(&self) -> Dtype {
        Dtype::from_code(unsafe { sys::mlxs_array_dtype(self.raw) }).expect("known dtype")
    }

    /// Number of elements.
    pub fn size(&self) -> usize {
        unsafe { sys::mlxs_array_size(self.raw) }
    }

    /// Bytes of data.
    pub fn nbytes(&self) -> usize {
        unsafe { sys::mlxs_array_nbytes(self.raw) }
    }

    /// Identity of the underlying graph node.
    pub fn id(&self) -> usize {
        let mut id = 0;
        unsafe { sys::mlxs_array_id(self.raw, &mut id) };
        id
    }

    /// Evaluates this array.
    pub fn eval(&self) -> Result<()> {
        crate::eval(&[self])
    }

    /// Copies the data to the host, converted to `T`.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        let n = self.size();
        let mut v = vec![T::default(); n];
        check(unsafe {
            sys::mlxs_array_to_host(self.raw, T::DTYPE as i32, v.as_mut_ptr().cast(), n * std::mem::size_of::<T>())
        })?;
        Ok(v)
    }

    /// The single element as f32.
    pub fn item_f32(&self) -> Result<f32> {
        let mut v = 0.0;
        check(unsafe { sys::mlxs_array_item_f64(self.raw, &mut v) })?;
        Ok(v as f32)
    }

    /// The single element as i64.
    pub fn item_i64(&self) -> Result<i64> {
        let mut v = 0;
        check(unsafe { sys::mlxs_array_item_i64(self.raw, &mut v) })?;
        Ok(v)
    }
}

/// Evaluates several arrays together.
pub fn eval(arrays: &[&Array]) -> Result<()> {
    let raws: Vec<_> = arrays.iter().map(|a| a.raw).collect();
    check(unsafe { sys::mlxs_eval(raws.as_ptr(), raws.len()) })
}

/// Queues evaluation of several arrays and returns at once.
pub fn async_eval(arrays: &[&Array]) -> Result<()> {
    let raws: Vec<_> = arrays.iter().map(|a| a.raw).collect();
    check(unsafe { sys::mlxs_async_eval(raws.as_ptr(), raws.len()) })
}

/// The primitives of the unevaluated graph behind `arrays`, as (name,
/// count) pairs, most frequent first: what one evaluation will schedule.
pub fn graph_census(arrays: &[&Array]) -> Result<Vec<(String, usize)>> {
    let raws: Vec<_> = arrays.iter().map(|a| a.raw).collect();
    let mut p = std::ptr::null_mut();
    check(unsafe { sys::mlxs_graph_census(raws.as_ptr(), raws.len(), &mut p) })?;
    let txt = unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned();
    unsafe { sys::mlxs_string_free(p) };
    Ok(txt
        .lines()
        .filter_map(|l| l.rsplit_once(' ').and_then(|(k, c)| Some((k.to_string(), c.parse().ok()?))))
        .collect())
}

/// Waits for all queued work on the default stream.
pub fn synchronize() -> Result<()> {
    check(unsafe { sys::mlxs_synchronize() })
}

/// Runs a shim call that writes one array handle.
pub(crate) fn out1(f: impl FnOnce(*mut mlx_sys::mlxs_array) -> std::ffi::c_int) -> Result<Array> {
    let mut out: mlx_sys::mlxs_array = std::ptr::null_mut();
    check(f(&mut out))?;
    // SAFETY: on success the shim wrote a fresh owned handle.
    Ok(unsafe { Array::from_raw(out) })
}
