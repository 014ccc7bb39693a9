//! Quantization: affine and microscaling formats, quantized matmuls and the
//! gathered (expert) variants used by MoE layers.

use crate::{check, out1, Array, Dtype, Result};
use mlx_sys as sys;
use std::borrow::Cow;
use std::ffi::{CStr, CString};
use std::ptr::null_mut;

fn opt(a: Option<&Array>) -> sys::mlxs_array {
    a.map_or(null_mut(), |a| a.as_raw())
}

/// How a weight is quantized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuantSpec {
    /// Elements sharing one scale (and bias).
    pub group_size: i32,
    /// Bits per element.
    pub bits: i32,
    /// "affine" (scale + bias), or "mxfp4" / "nvfp4" / "mxfp8".
    pub mode: String,
}

impl QuantSpec {
    /// Affine quantization.
    pub fn affine(group_size: i32, bits: i32) -> Self {
        QuantSpec { group_size, bits, mode: "affine".into() }
    }
    /// The mode as a C string; the known modes borrow a static string, so a
    /// quantized matmul does not allocate.
    fn mode_c(&self) -> Cow<'static, CStr> {
        match self.mode.as_str() {
            "affine" => Cow::Borrowed(c"affine"),
            "mxfp4" => Cow::Borrowed(c"mxfp4"),
            "mxfp8" => Cow::Borrowed(c"mxfp8"),
            "nvfp4" => Cow::Borrowed(c"nvfp4"),
            m => Cow::Owned(CString::new(m).unwrap_or_else(|_| c"affine".to_owned())),
        }
    }
}

/// A quantized matrix: packed weights, scales and (affine) biases.
#[derive(Debug, Clone)]
pub struct Quantized {
    /// Packed weights (uint32).
    pub w: Array,
    /// Per-group scales.
    pub scales: Array,
    /// Per-group biases (affine mode only).
    pub biases: Option<Array>,
}

/// Quantizes `w` along its last axis.
pub fn quantize(w: &Array, spec: &QuantSpec) -> Result<Quantized> {
    let (mut q, mut s, mut b) = (null_mut(), null_mut(), null_mut());
    let m = spec.mode_c();
    check(unsafe { sys::mlxs_quantize(w.as_raw(), spec.group_size, spec.bits, m.as_ptr(), &mut q, &mut s, &mut b) })?;
    unsafe {
        Ok(Quantized {
            w: Array::from_raw(q),
            scales: Array::from_raw(s),
            biases: if b.is_null() { None } else { Some(Array::from_raw(b)) },
        })
    }
}

/// Dequantizes to `dtype` (or the scales' dtype when `None`).
pub fn dequantize(q: &Quantized, spec: &QuantSpec, dtype: Option<Dtype>) -> Result<Array> {
    let m = spec.mode_c();
    out1(|o| unsafe {
        sys::mlxs_dequantize(
            q.w.as_raw(),
            q.scales.as_raw(),
            opt(q.biases.as_ref()),
            spec.group_size,
            spec.bits,
            m.as_ptr(),
            dtype.map_or(-1, |d| d as i32),
            o,
        )
    })
}

/// `x @ dequant(w).T` (or without the transpose) on the packed weights.
pub fn quantized_matmul(x: &Array, q: &Quantized, spec: &QuantSpec, transpose: bool) -> Result<Array> {
    let m = spec.mode_c();
    out1(|o| unsafe {
        sys::mlxs_quantized_matmul(
            x.as_raw(),
            q.w.as_raw(),
            q.scales.as_raw(),
            opt(q.biases.as_ref()),
            transpose as i32,
            spec.group_size,
            spec.bits,
            m.as_ptr(),
            o,
        )
    })
}

/// Batched matmul gathering the left and right operands by index (MoE experts).
pub fn gather_mm(a: &Array, b: &Array, lhs: Option<&Array>, rhs: Option<&Array>, sorted: bool) -> Result<Array> {
    out1(|o| unsafe { sys::mlxs_gather_mm(a.as_raw(), b.as_raw(), opt(lhs), opt(rhs), sorted as i32, o) })
}

/// Quantized [`gather_mm`].
pub fn gather_qmm(
    x: &Array,
    q: &Quantized,
    spec: &QuantSpec,
    lhs: Option<&Array>,
    rhs: Option<&Array>,
    transpose: bool,
    sorted: bool,
) -> Result<Array> {
    let m = spec.mode_c();
    out1(|o| unsafe {
        sys::mlxs_gather_qmm(
            x.as_raw(),
            q.w.as_raw(),
            q.scales.as_raw(),
            opt(q.biases.as_ref()),
            opt(lhs),
            opt(rhs),
            transpose as i32,
            spec.group_size,
            spec.bits,
            m.as_ptr(),
            sorted as i32,
            o,
        )
    })
}
