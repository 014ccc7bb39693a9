//! Combining arrays: select, concatenate, stack, scatter, fused multiply-add.

use crate::ops::raws;
use crate::{out1, Array, Result};
use mlx_sys as sys;

/// `where(cond, x, y)`.
pub fn where_(cond: &Array, x: &Array, y: &Array) -> Result<Array> {
    out1(|o| unsafe { sys::mlxs_where(cond.as_raw(), x.as_raw(), y.as_raw(), o) })
}

/// Concatenates along an axis.
pub fn concatenate(arrays: &[&Array], axis: i32) -> Result<Array> {
    let r = raws(arrays);
    out1(|o| unsafe { sys::mlxs_concatenate(r.as_ptr(), r.len(), axis, o) })
}

/// Stacks along a new axis.
pub fn stack(arrays: &[&Array], axis: i32) -> Result<Array> {
    let r = raws(arrays);
    out1(|o| unsafe { sys::mlxs_stack(r.as_ptr(), r.len(), axis, o) })
}

/// How [`scatter`] combines updates with existing values.
#[derive(Debug, Clone, Copy)]
pub enum ScatterOp {
    /// overwrite
    Set = 0,
    /// add
    Add = 1,
    /// multiply
    Prod = 2,
    /// max
    Max = 3,
    /// min
    Min = 4,
}

/// Scatters `updates` into `a` at `indices` (one index array per axis in `axes`).
pub fn scatter(op: ScatterOp, a: &Array, indices: &[&Array], updates: &Array, axes: &[i32]) -> Result<Array> {
    let r = raws(indices);
    out1(|o| unsafe {
        sys::mlxs_scatter(op as i32, a.as_raw(), r.as_ptr(), r.len(), updates.as_raw(), axes.as_ptr(), axes.len(), o)
    })
}

/// `beta * c + alpha * (a @ b)`.
pub fn addmm(c: &Array, a: &Array, b: &Array, alpha: f32, beta: f32) -> Result<Array> {
    out1(|o| unsafe { sys::mlxs_addmm(c.as_raw(), a.as_raw(), b.as_raw(), alpha, beta, o) })
}
