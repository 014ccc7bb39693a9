//! Convolutions (channels last), plain and transposed.

use crate::{out1, Array, Error, Result};
use mlx_sys as sys;

/// N-d convolution (1, 2 or 3 spatial dims, channels last) with groups.
pub fn conv(x: &Array, w: &Array, stride: &[i32], padding: &[i32], dilation: &[i32], groups: i32) -> Result<Array> {
    let n = stride.len();
    if padding.len() != n || dilation.len() != n {
        return Err(Error::msg("conv: stride, padding and dilation differ in length"));
    }
    out1(|o| unsafe {
        sys::mlxs_conv(x.as_raw(), w.as_raw(), stride.as_ptr(), padding.as_ptr(), dilation.as_ptr(), n, groups, o)
    })
}

/// 1-d convolution (`[N, L, C]` input, `[O, K, C/groups]` weight).
pub fn conv1d(x: &Array, w: &Array, stride: i32, padding: i32, dilation: i32, groups: i32) -> Result<Array> {
    conv(x, w, &[stride], &[padding], &[dilation], groups)
}

/// 2-d convolution (`[N, H, W, C]` input).
pub fn conv2d(
    x: &Array,
    w: &Array,
    stride: [i32; 2],
    padding: [i32; 2],
    dilation: [i32; 2],
    groups: i32,
) -> Result<Array> {
    conv(x, w, &stride, &padding, &dilation, groups)
}

/// 3-d convolution (`[N, D, H, W, C]` input).
pub fn conv3d(
    x: &Array,
    w: &Array,
    stride: [i32; 3],
    padding: [i32; 3],
    dilation: [i32; 3],
    groups: i32,
) -> Result<Array> {
    conv(x, w, &stride, &padding, &dilation, groups)
}

/// Transposed convolution (1 or 2 spatial dims).
pub fn conv_transpose(
    x: &Array,
    w: &Array,
    stride: &[i32],
    padding: &[i32],
    dilation: &[i32],
    output_padding: &[i32],
    groups: i32,
) -> Result<Array> {
    let n = stride.len();
    if padding.len() != n || dilation.len() != n || output_padding.len() != n {
        return Err(Error::msg("conv_transpose: argument lengths differ"));
    }
    out1(|o| unsafe {
        sys::mlxs_conv_transpose(
            x.as_raw(),
            w.as_raw(),
            stride.as_ptr(),
            padding.as_ptr(),
            dilation.as_ptr(),
            output_padding.as_ptr(),
            n,
            groups,
            o,
        )
    })
}
