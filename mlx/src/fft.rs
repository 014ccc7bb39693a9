//! Fast Fourier transforms.

use crate::{out1, Array, Result};
use mlx_sys as sys;

/// Which FFT [`fft`] computes.
#[derive(Debug, Clone, Copy)]
pub enum FftKind {
    /// complex forward
    Fft = 0,
    /// complex inverse
    Ifft = 1,
    /// real forward
    Rfft = 2,
    /// real inverse
    Irfft = 3,
}

/// One-dimensional FFT along `axis`; `n` ≤ 0 uses the natural length.
pub fn fft(kind: FftKind, a: &Array, n: i32, axis: i32) -> Result<Array> {
    out1(|o| unsafe { sys::mlxs_fft(kind as i32, a.as_raw(), n, axis, o) })
}

pub use crate::array::{async_eval, eval, graph_census, synchronize};
