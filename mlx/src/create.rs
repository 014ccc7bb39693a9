//! Making arrays: zeros, ones, filled, ranges, identity and triangles.

use crate::{out1, Array, Dtype, Result};
use mlx_sys as sys;

/// Zeros.
pub fn zeros(shape: &[i32], d: Dtype) -> Result<Array> {
    out1(|o| unsafe { sys::mlxs_zeros(shape.as_ptr(), shape.len(), d as i32, o) })
}
/// Ones.
pub fn ones(shape: &[i32], d: Dtype) -> Result<Array> {
    out1(|o| unsafe { sys::mlxs_ones(shape.as_ptr(), shape.len(), d as i32, o) })
}
/// Filled with `v` (broadcast) as dtype `d`.
pub fn full(shape: &[i32], v: &Array, d: Dtype) -> Result<Array> {
    out1(|o| unsafe { sys::mlxs_full(shape.as_ptr(), shape.len(), v.as_raw(), d as i32, o) })
}
/// `[start, stop)` with a step.
pub fn arange(start: f64, stop: f64, step: f64, d: Dtype) -> Result<Array> {
    out1(|o| unsafe { sys::mlxs_arange(start, stop, step, d as i32, o) })
}
/// `num` evenly spaced values in [start, stop].
pub fn linspace(start: f64, stop: f64, num: i32, d: Dtype) -> Result<Array> {
    out1(|o| unsafe { sys::mlxs_linspace(start, stop, num, d as i32, o) })
}
/// Identity-like matrix with ones on diagonal k.
pub fn eye(n: i32, m: i32, k: i32, d: Dtype) -> Result<Array> {
    out1(|o| unsafe { sys::mlxs_eye(n, m, k, d as i32, o) })
}
/// Ones at and below diagonal k.
pub fn tri(n: i32, m: i32, k: i32, d: Dtype) -> Result<Array> {
    out1(|o| unsafe { sys::mlxs_tri(n, m, k, d as i32, o) })
}
