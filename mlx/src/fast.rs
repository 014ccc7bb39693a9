//! MLX's fused kernels: norms, rotary embedding, attention, gated delta rule.

use crate::error::check;
use crate::{out1, Array, Error, Result};
use mlx_sys as sys;
use std::ffi::CStr;
use std::ptr::null_mut;

fn opt(a: Option<&Array>) -> sys::mlxs_array {
    a.map_or(null_mut(), |a| a.as_raw())
}

/// RMS norm over the last axis, scaled by `weight` when given.
pub fn rms_norm(x: &Array, weight: Option<&Array>, eps: f32) -> Result<Array> {
    out1(|o| unsafe { sys::mlxs_rms_norm(x.as_raw(), opt(weight), eps, o) })
}

/// Layer norm over the last axis.
pub fn layer_norm(x: &Array, weight: Option<&Array>, bias: Option<&Array>, eps: f32) -> Result<Array> {
    out1(|o| unsafe { sys::mlxs_layer_norm(x.as_raw(), opt(weight), opt(bias), eps, o) })
}

/// The position offset of a rope call: a host integer or a device array
/// (one per batch row, or a scalar).
#[derive(Debug, Clone, Copy)]
pub enum RopeOffset<'a> {
    /// Same offset for every row.
    Int(i32),
    /// Offsets on the device.
    Array(&'a Array),
}

/// Rotary position embedding on the first `dims` features of the last axis.
///
/// Either `base` (frequencies `base^(-2i/dims)`) or `freqs` (custom inverse
/// frequencies, e.g. llama3 scaling) must be given.
pub fn rope(
    x: &Array,
    dims: i32,
    traditional: bool,
    base: Option<f32>,
    scale: f32,
    offset: RopeOffset<'_>,
    freqs: Option<&Array>,
) -> Result<Array> {
    if base.is_none() == freqs.is_none() {
        return Err(Error::msg("rope: give exactly one of base and freqs"));
    }
    let (off, arr) = match offset {
        RopeOffset::Int(i) => (i, null_mut()),
        RopeOffset::Array(a) => (0, a.as_raw()),
    };
    out1(|o| unsafe {
        sys::mlxs_rope(
            x.as_raw(),
            dims,
            traditional as i32,
            base.unwrap_or(0.0),
            base.is_some() as i32,
            scale,
            off,
            arr,
            opt(freqs),
            o,
        )
    })
}

/// The mask of an attention call.
#[derive(Debug, Clone, Copy)]
pub enum Mask<'a> {
    /// No mask.
    None,
    /// Causal mask aligned to the end of the keys.
    Causal,
    /// Explicit additive (float) or boolean mask, broadcast to the scores.
    Array(&'a Array),
}

/// Fused `softmax(q kᵀ · scale + mask) v`, with optional attention sinks.
///
/// `q` is `[B, Hq, L, D]`, `k`/`v` are `[B, Hkv, S, D]` (grouped-query when
/// Hq is a multiple of Hkv).
pub fn scaled_dot_product_attention(
    q: &Array,
    k: &Array,
    v: &Array,
    scale: f32,
    mask: Mask<'_>,
    sinks: Option<&Array>,
) -> Result<Array> {
    // Static C strings: no allocation per call.
    let (mode, arr): (&CStr, _) = match mask {
        Mask::None => (c"", null_mut()),
        Mask::Causal => (c"causal", null_mut()),
        Mask::Array(a) => (c"array", a.as_raw()),
    };
    out1(|o| unsafe { sys::mlxs_sdpa(q.as_raw(), k.as_raw(), v.as_raw(), scale, mode.as_ptr(), arr, opt(sinks), o) })
}

/// MLX's fused gated delta rule (Qwen3.5's linear attention).
///
/// Returns `(y, new_state)`. Backends that do not implement it return an
/// error; callers fall back to an ops-based scan.
pub fn gated_delta_update(
    q: &Array,
    k: &Array,
    v: &Array,
    g: &Array,
    beta: &Array,
    state: Option<&Array>,
    mask: Option<&Array>,
) -> Result<(Array, Array)> {
    let mut y = null_mut();
    let mut s = null_mut();
    crate::check(unsafe {
        sys::mlxs_gated_delta_update(
            q.as_raw(),
            k.as_raw(),
            v.as_raw(),
            g.as_raw(),
            beta.as_raw(),
            opt(state),
            opt(mask),
            &mut y,
            &mut s,
        )
    })?;
    Ok(unsafe { (Array::from_raw(y), Array::from_raw(s)) })
}

/// `silu(gate) * up` as famlx's CPU primitive (one node, bit-equal to MLX's
/// compiled kernel for that graph) when the default stream is a CPU one and
/// the operands fit; `None` otherwise.
pub fn cpu_swiglu(gate: &Array, up: &Array) -> Result<Option<Array>> {
    let mut out: sys::mlxs_array = null_mut();
    check(unsafe { sys::mlxs_cpu_swiglu(gate.as_raw(), up.as_raw(), &mut out) })?;
    // SAFETY: a non-null result is a fresh owned handle.
    Ok((!out.is_null()).then(|| unsafe { Array::from_raw(out) }))
}
