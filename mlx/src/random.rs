//! Random numbers: explicit keys, or MLX's global key when `key` is `None`.

use crate::{check, out1, Array, Dtype, Result};
use mlx_sys as sys;
use std::ptr::null_mut;

fn opt(a: Option<&Array>) -> sys::mlxs_array {
    a.map_or(null_mut(), |a| a.as_raw())
}

/// Seeds the global key.
pub fn seed(s: u64) -> Result<()> {
    check(unsafe { sys::mlxs_random_seed(s) })
}

/// A key from a seed.
pub fn key(seed: u64) -> Result<Array> {
    out1(|o| unsafe { sys::mlxs_random_key(seed, o) })
}

/// Splits a key into `num` keys (stacked on axis 0).
pub fn split(key: &Array, num: i32) -> Result<Array> {
    out1(|o| unsafe { sys::mlxs_random_split(key.as_raw(), num, o) })
}

/// Uniform in [low, high).
pub fn uniform(low: f32, high: f32, shape: &[i32], dtype: Dtype, key: Option<&Array>) -> Result<Array> {
    let (lo, hi) = (Array::f32(low), Array::f32(high));
    out1(|o| unsafe {
        sys::mlxs_random_uniform(lo.as_raw(), hi.as_raw(), shape.as_ptr(), shape.len(), dtype as i32, opt(key), o)
    })
}

/// Normal with mean `loc` and standard deviation `scale`.
pub fn normal(shape: &[i32], dtype: Dtype, loc: f32, scale: f32, key: Option<&Array>) -> Result<Array> {
    out1(|o| unsafe { sys::mlxs_random_normal(shape.as_ptr(), shape.len(), dtype as i32, loc, scale, opt(key), o) })
}

/// Samples indices from unnormalised log-probabilities along `axis`.
pub fn categorical(logits: &Array, axis: i32, key: Option<&Array>) -> Result<Array> {
    out1(|o| unsafe { sys::mlxs_random_categorical(logits.as_raw(), axis, 0, opt(key), o) })
}

/// Draws `num_samples` indices per row from unnormalised log-probabilities
/// along `axis` (the samples form a new last axis).
pub fn categorical_n(logits: &Array, axis: i32, num_samples: i32, key: Option<&Array>) -> Result<Array> {
    if num_samples <= 0 {
        return Err(crate::Error::msg("categorical_n: num_samples must be positive"));
    }
    out1(|o| unsafe { sys::mlxs_random_categorical(logits.as_raw(), axis, num_samples, opt(key), o) })
}

/// Integers in [low, high).
pub fn randint(low: i32, high: i32, shape: &[i32], dtype: Dtype, key: Option<&Array>) -> Result<Array> {
    let (lo, hi) = (Array::i32(low), Array::i32(high));
    out1(|o| unsafe {
        sys::mlxs_random_randint(lo.as_raw(), hi.as_raw(), shape.as_ptr(), shape.len(), dtype as i32, opt(key), o)
    })
}

/// Bernoulli draws with probability `p`.
pub fn bernoulli(p: &Array, shape: &[i32], key: Option<&Array>) -> Result<Array> {
    out1(|o| unsafe { sys::mlxs_random_bernoulli(p.as_raw(), shape.as_ptr(), shape.len(), opt(key), o) })
}

/// Standard Gumbel noise.
pub fn gumbel(shape: &[i32], dtype: Dtype, key: Option<&Array>) -> Result<Array> {
    out1(|o| unsafe { sys::mlxs_random_gumbel(shape.as_ptr(), shape.len(), dtype as i32, opt(key), o) })
}
