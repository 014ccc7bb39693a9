//! Methods of [`Array`]: arithmetic, comparisons, reductions, scans,
//! shapes, indexing and matmul. Free functions that make or combine arrays
//! live in `create`, `combine`, `conv` and `fft`.

use crate::{check, out1, Array, Dtype, Error, Result};
use mlx_sys as sys;
use std::ffi::CString;
use std::ptr::null_mut;

fn opt(a: Option<&Array>) -> sys::mlxs_array {
    a.map_or(null_mut(), |a| a.as_raw())
}

/// The raw handles of `a`, for shim calls taking arrays of arrays.
pub(crate) fn raws(a: &[&Array]) -> Vec<sys::mlxs_array> {
    a.iter().map(|x| x.as_raw()).collect()
}

macro_rules! unary {
    ($($(#[$m:meta])* $name:ident = $code:expr;)*) => {
        impl Array {
            $($(#[$m])* pub fn $name(&self) -> Result<Array> {
                out1(|o| unsafe { sys::mlxs_unary($code, self.as_raw(), o) })
            })*
        }
    };
}

unary! {
    /// |x|
    abs = 0;
    /// -x
    neg = 1;
    /// e^x
    exp = 2;
    /// ln x
    log = 3;
    /// ln(1 + x)
    log1p = 4;
    /// √x
    sqrt = 5;
    /// 1/√x
    rsqrt = 6;
    /// x²
    square = 7;
    /// sin x
    sin = 8;
    /// cos x
    cos = 9;
    /// tanh x
    tanh = 10;
    /// 1 / (1 + e^-x)
    sigmoid = 11;
    /// erf x
    erf = 12;
    /// ⌊x⌋
    floor = 13;
    /// ⌈x⌉
    ceil = 14;
    /// round half to even
    round = 15;
    /// sign x
    sign = 16;
    /// 1/x
    reciprocal = 17;
    /// logical not
    logical_not = 18;
    /// x is NaN
    isnan = 19;
    /// x is ±inf
    isinf = 20;
    /// blocks gradients
    stop_gradient = 21;
    /// log2 x
    log2 = 22;
    /// log10 x
    log10 = 23;
    /// tan x
    tan = 24;
    /// inverse erf
    erfinv = 25;
    /// e^x - 1
    expm1 = 26;
    /// a copy (new graph node)
    copy = 27;
    /// x is finite
    isfinite = 28;
    /// real part
    real = 29;
    /// imaginary part
    imag = 30;
    /// bitwise not
    bitwise_invert = 31;
    /// atan x
    arctan = 32;
    /// sinh x
    sinh = 33;
    /// cosh x
    cosh = 34;
}

macro_rules! binary {
    ($($(#[$m:meta])* $name:ident = $code:expr;)*) => {
        impl Array {
            $($(#[$m])* pub fn $name(&self, other: &Array) -> Result<Array> {
                out1(|o| unsafe { sys::mlxs_binary($code, self.as_raw(), other.as_raw(), o) })
            })*
        }
    };
}

binary! {
    /// a + b (broadcasting)
    add = 0;
    /// a - b
    sub = 1;
    /// a * b
    mul = 2;
    /// a / b
    div = 3;
    /// elementwise max
    maximum = 4;
    /// elementwise min
    minimum = 5;
    /// a ^ b
    power = 6;
    /// a mod b
    remainder = 7;
    /// a == b
    eq = 8;
    /// a != b
    ne = 9;
    /// a < b
    lt = 10;
    /// a <= b
    le = 11;
    /// a > b
    gt = 12;
    /// a >= b
    ge = 13;
    /// a && b
    logical_and = 14;
    /// a || b
    logical_or = 15;
    /// log(e^a + e^b)
    logaddexp = 16;
    /// atan2(a, b)
    arctan2 = 17;
    /// ⌊a / b⌋
    floor_divide = 18;
    /// a & b
    bitwise_and = 19;
    /// a | b
    bitwise_or = 20;
    /// a ^ b (xor)
    bitwise_xor = 21;
    /// a << b
    left_shift = 22;
    /// a >> b
    right_shift = 23;
    /// outer product of two vectors
    outer = 24;
    /// inner product over the last axes
    inner = 25;
}

/// Scalar variants: the scalar takes this array's dtype, so bf16 stays bf16.
impl Array {
    /// a + s
    pub fn add_s(&self, s: f64) -> Result<Array> {
        self.add(&self.scalar_like(s)?)
    }
    /// a - s
    pub fn sub_s(&self, s: f64) -> Result<Array> {
        self.sub(&self.scalar_like(s)?)
    }
    /// a * s
    pub fn mul_s(&self, s: f64) -> Result<Array> {
        self.mul(&self.scalar_like(s)?)
    }
    /// a / s
    pub fn div_s(&self, s: f64) -> Result<Array> {
        self.div(&self.scalar_like(s)?)
    }
    /// a ^ s
    pub fn pow_s(&self, s: f64) -> Result<Array> {
        self.power(&self.scalar_like(s)?)
    }
}

#[derive(Clone, Copy)]
enum Reduce {
    Sum = 0,
    Mean = 1,
    Max = 2,
    Min = 3,
    Prod = 4,
    All = 5,
    Any = 6,
    LogSumExp = 7,
}

fn reduce(a: &Array, op: Reduce, axes: Option<&[i32]>, keepdims: bool) -> Result<Array> {
    let (p, n, all) = match axes {
        Some(ax) => (ax.as_ptr(), ax.len(), 0),
        None => (std::ptr::null(), 0, 1),
    };
    out1(|o| unsafe { sys::mlxs_reduce(op as i32, a.as_raw(), p, n, all, keepdims as i32, o) })
}

macro_rules! reductions {
    ($($(#[$m:meta])* $name:ident, $all:ident = $op:ident;)*) => {
        impl Array {
            $(
                $(#[$m])* pub fn $name(&self, axes: &[i32], keepdims: bool) -> Result<Array> {
                    reduce(self, Reduce::$op, Some(axes), keepdims)
                }
                $(#[$m])* #[doc = "(over all axes)"]
                pub fn $all(&self) -> Result<Array> {
                    reduce(self, Reduce::$op, None, false)
                }
            )*
        }
    };
}

reductions! {
    /// Sum over axes.
    sum, sum_all = Sum;
    /// Mean over axes.
    mean, mean_all = Mean;
    /// Max over axes.
    max, max_all = Max;
    /// Min over axes.
    min, min_all = Min;
    /// Product over axes.
    prod, prod_all = Prod;
    /// All true over axes.
    all, all_all = All;
    /// Any true over axes.
    any, any_all = Any;
    /// log Σ e^x over axes.
    logsumexp, logsumexp_all = LogSumExp;
}

impl Array {
    /// Index of the max along an axis.
    pub fn argmax(&self, axis: i32, keepdims: bool) -> Result<Array> {
        out1(|o| unsafe { sys::mlxs_arg_reduce(0, self.as_raw(), axis, keepdims as i32, o) })
    }
    /// Index of the min along an axis.
    pub fn argmin(&self, axis: i32, keepdims: bool) -> Result<Array> {
        out1(|o| unsafe { sys::mlxs_arg_reduce(1, self.as_raw(), axis, keepdims as i32, o) })
    }
    /// Variance over axes.
    pub fn var(&self, axes: &[i32], keepdims: bool, ddof: i32) -> Result<Array> {
        out1(|o| unsafe { sys::mlxs_var(self.as_raw(), axes.as_ptr(), axes.len(), 0, keepdims as i32, ddof, 0, o) })
    }
    /// Standard deviation over axes.
    pub fn std(&self, axes: &[i32], keepdims: bool, ddof: i32) -> Result<Array> {
        out1(|o| unsafe { sys::mlxs_var(self.as_raw(), axes.as_ptr(), axes.len(), 0, keepdims as i32, ddof, 1, o) })
    }
    /// Softmax over axes; `precise` accumulates in f32 for low-precision inputs.
    pub fn softmax(&self, axes: &[i32], precise: bool) -> Result<Array> {
        out1(|o| unsafe { sys::mlxs_softmax(self.as_raw(), axes.as_ptr(), axes.len(), precise as i32, o) })
    }

    fn scan(&self, op: i32, axis: i32, reverse: bool, inclusive: bool) -> Result<Array> {
        out1(|o| unsafe { sys::mlxs_scan(op, self.as_raw(), axis, reverse as i32, inclusive as i32, o) })
    }
    /// Cumulative sum.
    pub fn cumsum(&self, axis: i32, reverse: bool, inclusive: bool) -> Result<Array> {
        self.scan(0, axis, reverse, inclusive)
    }
    /// Cumulative product.
    pub fn cumprod(&self, axis: i32, reverse: bool, inclusive: bool) -> Result<Array> {
        self.scan(1, axis, reverse, inclusive)
    }
    /// Cumulative max.
    pub fn cummax(&self, axis: i32, reverse: bool, inclusive: bool) -> Result<Array> {
        self.scan(2, axis, reverse, inclusive)
    }
    /// Cumulative min.
    pub fn cummin(&self, axis: i32, reverse: bool, inclusive: bool) -> Result<Array> {
        self.scan(3, axis, reverse, inclusive)
    }
    /// Cumulative log-sum-exp.
    pub fn logcumsumexp(&self, axis: i32, reverse: bool, inclusive: bool) -> Result<Array> {
        self.scan(4, axis, reverse, inclusive)
    }

    // ---- shape ----

    /// Converts the element type.
    pub fn astype(&self, d: Dtype) -> Result<Array> {
        if self.dtype() == d {
            return Ok(self.clone());
        }
        out1(|o| unsafe { sys::mlxs_astype(self.as_raw(), d as i32, o) })
    }
    /// Reinterprets the bytes as another dtype.
    pub fn view(&self, d: Dtype) -> Result<Array> {
        out1(|o| unsafe { sys::mlxs_view(self.as_raw(), d as i32, o) })
    }
    /// New shape (one dimension may be -1).
    pub fn reshape(&self, shape: &[i32]) -> Result<Array> {
        out1(|o| unsafe { sys::mlxs_reshape(self.as_raw(), shape.as_ptr(), shape.len(), o) })
    }
    /// Permutes axes.
    pub fn transpose(&self, axes: &[i32]) -> Result<Array> {
        out1(|o| unsafe { sys::mlxs_transpose(self.as_raw(), axes.as_ptr(), axes.len(), o) })
    }
    /// Reverses all axes.
    pub fn t(&self) -> Result<Array> {
        out1(|o| unsafe { sys::mlxs_transpose(self.as_raw(), std::ptr::null(), 0, o) })
    }
    /// Swaps two axes.
    pub fn swapaxes(&self, a: i32, b: i32) -> Result<Array> {
        let n = self.ndim() as i32;
        let (a, b) = ((a + n) % n, (b + n) % n);
        let mut axes: Vec<i32> = (0..n).collect();
        axes.swap(a as usize, b as usize);
        self.transpose(&axes)
    }
    /// Removes size-1 axes.
    pub fn squeeze(&self, axes: &[i32]) -> Result<Array> {
        out1(|o| unsafe { sys::mlxs_squeeze(self.as_raw(), axes.as_ptr(), axes.len(), o) })
    }
    /// Inserts size-1 axes.
    pub fn expand_dims(&self, axes: &[i32]) -> Result<Array> {
        out1(|o| unsafe { sys::mlxs_expand_dims(self.as_raw(), axes.as_ptr(), axes.len(), o) })
    }
    /// Broadcasts to a shape.
    pub fn broadcast_to(&self, shape: &[i32]) -> Result<Array> {
        out1(|o| unsafe { sys::mlxs_broadcast_to(self.as_raw(), shape.as_ptr(), shape.len(), o) })
    }
    /// Flattens axes start..=end.
    pub fn flatten(&self, start: i32, end: i32) -> Result<Array> {
        out1(|o| unsafe { sys::mlxs_flatten(self.as_raw(), start, end, o) })
    }
    /// A row-contiguous copy when needed.
    pub fn contiguous(&self) -> Result<Array> {
        out1(|o| unsafe { sys::mlxs_contiguous(self.as_raw(), o) })
    }
    /// Strided slice: `start`, `stop`, `strides` per axis (all axes given).
    pub fn slice(&self, start: &[i32], stop: &[i32], strides: &[i32]) -> Result<Array> {
        let n = self.ndim();
        if start.len() != n || stop.len() != n || strides.len() != n {
            return Err(Error::msg(format!(
                "slice: expected {n} starts/stops/strides, got {}/{}/{}",
                start.len(),
                stop.len(),
                strides.len()
            )));
        }
        out1(|o| unsafe { sys::mlxs_slice(self.as_raw(), start.as_ptr(), stop.as_ptr(), strides.as_ptr(), n, o) })
    }
    /// `a[..., start:stop, ...]` on one axis.
    pub fn slice_axis(&self, axis: i32, start: i32, stop: i32) -> Result<Array> {
        let n = self.ndim();
        let ax = if axis < 0 { axis + n as i32 } else { axis } as usize;
        if ax >= n {
            return Err(Error::msg(format!("slice_axis: axis {axis} for {n} dims")));
        }
        let d = self.shape()[ax];
        let fix = |v: i32| if v < 0 { (v + d).max(0) } else { v.min(d) };
        let mut s = vec![0; n];
        let mut e = self.shape().to_vec();
        s[ax] = fix(start);
        e[ax] = fix(stop);
        self.slice(&s, &e, &vec![1; n])
    }
    /// Slice of `sizes` elements along `axes` starting at a device index array.
    pub fn slice_dynamic(&self, start: &Array, axes: &[i32], sizes: &[i32]) -> Result<Array> {
        out1(|o| unsafe {
            sys::mlxs_slice_dynamic(
                self.as_raw(),
                start.as_raw(),
                axes.as_ptr(),
                axes.len(),
                sizes.as_ptr(),
                sizes.len(),
                o,
            )
        })
    }
    /// Writes `update` into `self[start:stop:strides]`, returning the new array.
    pub fn slice_update(&self, update: &Array, start: &[i32], stop: &[i32], strides: &[i32]) -> Result<Array> {
        let n = self.ndim();
        if start.len() != n || stop.len() != n || strides.len() != n {
            return Err(Error::msg(format!("slice_update: expected {n} starts/stops/strides")));
        }
        out1(|o| unsafe {
            sys::mlxs_slice_update(
                self.as_raw(),
                update.as_raw(),
                start.as_ptr(),
                stop.as_ptr(),
                strides.as_ptr(),
                n,
                o,
            )
        })
    }
    /// Writes `update` at a device index `start` along `axes`.
    pub fn slice_update_dynamic(&self, update: &Array, start: &Array, axes: &[i32]) -> Result<Array> {
        out1(|o| unsafe {
            sys::mlxs_slice_update_dynamic(self.as_raw(), update.as_raw(), start.as_raw(), axes.as_ptr(), axes.len(), o)
        })
    }
    /// Gathers `indices` along `axis`.
    pub fn take(&self, indices: &Array, axis: i32) -> Result<Array> {
        out1(|o| unsafe { sys::mlxs_take(self.as_raw(), indices.as_raw(), axis, 1, o) })
    }
    /// Gathers from the flattened array.
    pub fn take_flat(&self, indices: &Array) -> Result<Array> {
        out1(|o| unsafe { sys::mlxs_take(self.as_raw(), indices.as_raw(), 0, 0, o) })
    }
    /// `take_along_axis` (numpy semantics).
    pub fn take_along_axis(&self, indices: &Array, axis: i32) -> Result<Array> {
        out1(|o| unsafe { sys::mlxs_take_along_axis(self.as_raw(), indices.as_raw(), axis, o) })
    }
    /// `put_along_axis` (numpy semantics).
    pub fn put_along_axis(&self, indices: &Array, values: &Array, axis: i32) -> Result<Array> {
        out1(|o| unsafe { sys::mlxs_put_along_axis(self.as_raw(), indices.as_raw(), values.as_raw(), axis, o) })
    }
    /// Pads with a constant (`mode` "constant") or the edge values ("edge").
    pub fn pad(&self, axes: &[i32], low: &[i32], high: &[i32], value: &Array, mode: &str) -> Result<Array> {
        if axes.len() != low.len() || axes.len() != high.len() {
            return Err(Error::msg("pad: axes, low and high differ in length"));
        }
        let m = CString::new(mode).map_err(|_| Error::msg("pad: bad mode"))?;
        out1(|o| unsafe {
            sys::mlxs_pad(
                self.as_raw(),
                axes.as_ptr(),
                low.as_ptr(),
                high.as_ptr(),
                axes.len(),
                value.as_raw(),
                m.as_ptr(),
                o,
            )
        })
    }
    /// Splits into `num` equal parts along `axis`.
    pub fn split(&self, num: i32, axis: i32) -> Result<Vec<Array>> {
        let mut outs = vec![null_mut(); num.max(0) as usize];
        let mut n = 0;
        check(unsafe { sys::mlxs_split_sections(self.as_raw(), num, axis, outs.as_mut_ptr(), outs.len(), &mut n) })?;
        Ok(outs.into_iter().take(n).map(|r| unsafe { Array::from_raw(r) }).collect())
    }
    /// Splits at the given indices along `axis`.
    pub fn split_at(&self, indices: &[i32], axis: i32) -> Result<Vec<Array>> {
        let mut outs = vec![null_mut(); indices.len() + 1];
        let mut n = 0;
        check(unsafe {
            sys::mlxs_split_indices(
                self.as_raw(),
                indices.as_ptr(),
                indices.len(),
                axis,
                outs.as_mut_ptr(),
                outs.len(),
                &mut n,
            )
        })?;
        Ok(outs.into_iter().take(n).map(|r| unsafe { Array::from_raw(r) }).collect())
    }
    /// Repeats each element along `axis`.
    pub fn repeat(&self, repeats: i32, axis: i32) -> Result<Array> {
        out1(|o| unsafe { sys::mlxs_repeat(self.as_raw(), repeats, axis, o) })
    }
    /// Tiles the array.
    pub fn tile(&self, reps: &[i32]) -> Result<Array> {
        out1(|o| unsafe { sys::mlxs_tile(self.as_raw(), reps.as_ptr(), reps.len(), o) })
    }
    /// Reverses one axis.
    pub fn flip(&self, axis: i32) -> Result<Array> {
        out1(|o| unsafe { sys::mlxs_flip(self.as_raw(), axis, o) })
    }
    /// Rolls elements along an axis.
    pub fn roll(&self, shift: i32, axis: i32) -> Result<Array> {
        out1(|o| unsafe { sys::mlxs_roll(self.as_raw(), shift, axis, o) })
    }
    /// Sorted along an axis.
    pub fn sort(&self, axis: i32) -> Result<Array> {
        out1(|o| unsafe { sys::mlxs_sort(self.as_raw(), axis, 0, o) })
    }
    /// Indices that sort along an axis.
    pub fn argsort(&self, axis: i32) -> Result<Array> {
        out1(|o| unsafe { sys::mlxs_sort(self.as_raw(), axis, 1, o) })
    }
    /// Partition around the k-th element.
    pub fn partition(&self, kth: i32, axis: i32) -> Result<Array> {
        out1(|o| unsafe { sys::mlxs_partition(self.as_raw(), kth, axis, 0, o) })
    }
    /// Indices partitioning around the k-th element.
    pub fn argpartition(&self, kth: i32, axis: i32) -> Result<Array> {
        out1(|o| unsafe { sys::mlxs_partition(self.as_raw(), kth, axis, 1, o) })
    }
    /// Indices of the `k` largest entries along the last axis, in no
    /// particular order (expert routing).
    pub fn top_k_indices(&self, k: i32) -> Result<Array> {
        let n = self.dim(-1);
        self.argpartition(n - k, -1)?.slice_axis(-1, n - k, n)
    }
    /// The k largest values along an axis (unordered).
    pub fn topk(&self, k: i32, axis: i32) -> Result<Array> {
        out1(|o| unsafe { sys::mlxs_topk(self.as_raw(), k, axis, o) })
    }
    /// Clamps into [lo, hi] (either may be absent).
    pub fn clip(&self, lo: Option<&Array>, hi: Option<&Array>) -> Result<Array> {
        out1(|o| unsafe { sys::mlxs_clip(self.as_raw(), opt(lo), opt(hi), o) })
    }
    /// A strided view.
    pub fn as_strided(&self, shape: &[i32], strides: &[i64], offset: usize) -> Result<Array> {
        if shape.len() != strides.len() {
            return Err(Error::msg("as_strided: shape and strides differ in length"));
        }
        out1(|o| unsafe {
            sys::mlxs_as_strided(self.as_raw(), shape.as_ptr(), shape.len(), strides.as_ptr(), offset, o)
        })
    }
    /// Lower triangle (k-th diagonal and below).
    pub fn tril(&self, k: i32) -> Result<Array> {
        out1(|o| unsafe { sys::mlxs_tril(self.as_raw(), k, o) })
    }
    /// Upper triangle.
    pub fn triu(&self, k: i32) -> Result<Array> {
        out1(|o| unsafe { sys::mlxs_triu(self.as_raw(), k, o) })
    }
    /// Matrix product.
    pub fn matmul(&self, b: &Array) -> Result<Array> {
        out1(|o| unsafe { sys::mlxs_matmul(self.as_raw(), b.as_raw(), o) })
    }
}
