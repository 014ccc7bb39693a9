//! Keys or values along the sequence axis, dense or packed (quantized), with
//! one set of slice / write / concatenate operations so the growth and ring
//! logic of the cache kinds is written once for both representations.

use mlx::quant::{dequantize, quantize, QuantSpec, Quantized};
use mlx::{concatenate, zeros, Array, Error, Result};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Quantization of keys or of values (affine, along head_dim).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QBits {
    /// Bits per element (2, 3, 4, 6 or 8).
    pub bits: i32,
    /// Elements sharing one scale and bias (32, 64 or 128).
    pub group_size: i32,
}

impl QBits {
    /// The MLX quantization spec.
    pub fn spec(&self) -> QuantSpec {
        QuantSpec::affine(self.group_size, self.bits)
    }
}

/// Keys or values `[B, H, S, D]`; the sequence axis is 2 in every component.
#[derive(Clone)]
pub enum Seq {
    /// Plain array.
    Dense(Array),
    /// Packed uint32 data with per-group scales and biases.
    Packed(Quantized, QBits),
}

/// The sequence axis.
const AX: i32 = 2;

fn parts(q: &Quantized) -> Vec<&Array> {
    let mut v = vec![&q.w, &q.scales];
    v.extend(q.biases.as_ref());
    v
}

fn rebuild(mut v: Vec<Array>) -> Quantized {
    let biases = if v.len() > 2 { v.pop() } else { None };
    let scales = v.pop().expect("scales");
    let w = v.pop().expect("packed data");
    Quantized { w, scales, biases }
}

fn write_at(buf: &Array, x: &Array, at: i32) -> Result<Array> {
    let s = buf.shape();
    buf.slice_update(x, &[0, 0, at, 0], &[s[0], s[1], at + x.dim(AX), s[3]], &[1, 1, 1, 1])
}

impl Seq {
    /// Packs `x` when `q` is given, else keeps it dense.
    pub fn pack(x: &Array, q: Option<QBits>) -> Result<Seq> {
        let Some(q) = q else {
            return Ok(Seq::Dense(x.clone()));
        };
        let d = x.dim(-1);
        if d % q.group_size != 0 {
            // MLX's own message does not say which flag to change.
            return Err(Error::msg(format!(
                "--kv-group-size {} does not divide the head dimension {d}; use a group size that does (32, 64 or 128)",
                q.group_size
            )));
        }
        Ok(Seq::Packed(quantize(x, &q.spec())?, q))
    }

    /// This data packed with `q` (unchanged when already packed or `q` is None).
    pub fn packed(&self, q: Option<QBits>) -> Result<Seq> {
        match self {
            Seq::Dense(a) => Seq::pack(a, q),
            p => Ok(p.clone()),
        }
    }

    /// The quantization, when packed.
    pub fn qbits(&self) -> Option<QBits> {
        match self {
            Seq::Dense(_) => None,
            Seq::Packed(_, q) => Some(*q),
        }
    }

    fn first(&self) -> &Array {
        match self {
            Seq::Dense(a) => a,
            Seq::Packed(q, _) => &q.w,
        }
    }

    /// Positions held.
    pub fn len(&self) -> i32 {
        self.first().dim(AX)
    }

    /// Whether no position is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn map(&self, f: impl Fn(&Array) -> Result<Array>) -> Result<Seq> {
        Ok(match self {
            Seq::Dense(a) => Seq::Dense(f(a)?),
            Seq::Packed(q, b) => Seq::Packed(rebuild(parts(q).into_iter().map(f).collect::<Result<_>>()?), *b),
        })
    }

    /// Positions `[s, e)`.
    pub fn slice(&self, s: i32, e: i32) -> Result<Seq> {
        if s == 0 && e == self.len() {
            return Ok(self.clone());
        }
        self.map(|a| a.slice_axis(AX, s, e))
    }

    /// This buffer with `x` written at position `at` (in place when MLX can donate it).
    pub fn write(&self, at: i32, x: &Seq) -> Result<Seq> {
        match (self, x) {
            (Seq::Dense(b), Seq::Dense(x)) => Ok(Seq::Dense(write_at(b, x, at)?)),
            (Seq::Packed(b, qb), Seq::Packed(x, qx)) if qb == qx => {
                let v = parts(b).into_iter().zip(parts(x)).map(|(b, x)| write_at(b, x, at)).collect::<Result<_>>()?;
                Ok(Seq::Packed(rebuild(v), *qb))
            }
            _ => Err(Error::msg("cache: writing data of another representation")),
        }
    }

    /// Concatenation along the sequence axis (empty parts skipped).
    pub fn concat(parts_in: &[Seq]) -> Result<Seq> {
        let v: Vec<&Seq> = parts_in.iter().filter(|p| !p.is_empty()).collect();
        match v.as_slice() {
            [] => parts_in.first().cloned().ok_or_else(|| Error::msg("cache: nothing to concatenate")),
            [one] => Ok((*one).clone()),
            [Seq::Dense(_), ..] => {
                let arrs: Vec<&Array> = v.iter().map(|s| s.first()).collect();
                Ok(Seq::Dense(concatenate(&arrs, AX)?))
            }
            [Seq::Packed(_, q), ..] => {
                let qs: Vec<&Quantized> = v
                    .iter()
                    .map(|s| match s {
                        Seq::Packed(x, b) if b == q => Ok(x),
                        _ => Err(Error::msg("cache: concatenating data of different representations")),
                    })
                    .collect::<Result<_>>()?;
                let n = parts(qs[0]).len();
                let joined = (0..n)
                    .map(|i| {
                        let col: Vec<&Array> = qs.iter().map(|x| parts(x)[i]).collect();
                        concatenate(&col, AX)
                    })
                    .collect::<Result<_>>()?;
                Ok(Seq::Packed(rebuild(joined), *q))
            }
        }
    }

    /// A zero buffer of `len` positions shaped and typed like this one.
    pub fn zeros_like(&self, len: i32) -> Result<Seq> {
        self.map(|a| {
            let s = a.shape();
            zeros(&[s[0], s[1], len, s[3]], a.dtype())
        })
    }

    /// A buffer of `cap` positions holding this one's first `used`.
    pub fn with_capacity(&self, used: i32, cap: i32) -> Result<Seq> {
        let z = self.zeros_like(cap)?;
        if used == 0 {
            return Ok(z);
        }
        z.write(0, &self.slice(0, used)?)
    }

    /// The component arrays (for evaluation).
    pub fn arrays(&self) -> Vec<Array> {
        match self {
            Seq::Dense(a) => vec![a.clone()],
            Seq::Packed(q, _) => parts(q).into_iter().cloned().collect(),
        }
    }

    /// Dense data (dequantized when packed, in the scales' dtype).
    pub fn dense(&self) -> Result<Array> {
        match self {
            Seq::Dense(a) => Ok(a.clone()),
            Seq::Packed(q, b) => dequantize(q, &b.spec(), None),
        }
    }

    /// The component arrays named for a file: `name` when dense, else
    /// `name.weight`, `name.scales` and `name.biases`.
    pub fn named(&self, name: &str) -> Vec<(String, Array)> {
        match self {
            Seq::Dense(a) => vec![(name.to_string(), a.clone())],
            Seq::Packed(q, _) => {
                let mut v = vec![(format!("{name}.weight"), q.w.clone()), (format!("{name}.scales"), q.scales.clone())];
                v.extend(q.biases.iter().map(|b| (format!("{name}.biases"), b.clone())));
                v
            }
        }
    }

    /// Rebuilds what [`Seq::named`] wrote (packed with `q` when given).
    pub fn from_named(arrays: &HashMap<String, Array>, name: &str, q: Option<QBits>) -> Result<Seq> {
        let get = |n: &str| arrays.get(n).cloned().ok_or_else(|| Error::msg(format!("missing tensor {n}")));
        Ok(match q {
            None => Seq::Dense(get(name)?),
            Some(q) => Seq::Packed(
                Quantized {
                    w: get(&format!("{name}.weight"))?,
                    scales: get(&format!("{name}.scales"))?,
                    biases: arrays.get(&format!("{name}.biases")).cloned(),
                },
                q,
            ),
        })
    }
}

/// Keys and values together.
#[derive(Clone)]
pub struct Kv {
    /// keys
    pub k: Seq,
    /// values
    pub v: Seq,
}

impl Kv {
    /// New keys and values, packed per `q` (`(keys, values)` quantization).
    pub fn pack(k: &Array, v: &Array, q: (Option<QBits>, Option<QBits>)) -> Result<Kv> {
        Ok(Kv { k: Seq::pack(k, q.0)?, v: Seq::pack(v, q.1)? })
    }
    /// Both packed per `q` (parts already packed stay as they are).
    pub fn packed(&self, q: (Option<QBits>, Option<QBits>)) -> Result<Kv> {
        Ok(Kv { k: self.k.packed(q.0)?, v: self.v.packed(q.1)? })
    }
    /// Positions held.
    pub fn len(&self) -> i32 {
        self.k.len()
    }
    /// Whether no position is held.
    pub fn is_empty(&self) -> bool {
        self.k.is_empty()
    }
    /// Positions `[s, e)`.
    pub fn slice(&self, s: i32, e: i32) -> Result<Kv> {
        Ok(Kv { k: self.k.slice(s, e)?, v: self.v.slice(s, e)? })
    }
    /// `x` written at `at`.
    pub fn write(&self, at: i32, x: &Kv) -> Result<Kv> {
        Ok(Kv { k: self.k.write(at, &x.k)?, v: self.v.write(at, &x.v)? })
    }
    /// Concatenation along the sequence axis.
    pub fn concat(parts: &[Kv]) -> Result<Kv> {
        let ks: Vec<Seq> = parts.iter().map(|p| p.k.clone()).collect();
        let vs: Vec<Seq> = parts.iter().map(|p| p.v.clone()).collect();
        Ok(Kv { k: Seq::concat(&ks)?, v: Seq::concat(&vs)? })
    }
    /// Zeros of `len` positions.
    pub fn zeros_like(&self, len: i32) -> Result<Kv> {
        Ok(Kv { k: self.k.zeros_like(len)?, v: self.v.zeros_like(len)? })
    }
    /// A buffer of `cap` positions holding the first `used`.
    pub fn with_capacity(&self, used: i32, cap: i32) -> Result<Kv> {
        Ok(Kv { k: self.k.with_capacity(used, cap)?, v: self.v.with_capacity(used, cap)? })
    }
    /// The component arrays.
    pub fn arrays(&self) -> Vec<Array> {
        let mut a = self.k.arrays();
        a.extend(self.v.arrays());
        a
    }
    /// Dense keys and values.
    pub fn dense(&self) -> Result<(Array, Array)> {
        Ok((self.k.dense()?, self.v.dense()?))
    }
    /// Keys as `keys…` and values as `values…` (see [`Seq::named`]).
    pub fn named(&self) -> Vec<(String, Array)> {
        let mut a = self.k.named("keys");
        a.extend(self.v.named("values"));
        a
    }
    /// Rebuilds what [`Kv::named`] wrote.
    pub fn from_named(arrays: &HashMap<String, Array>, q: (Option<QBits>, Option<QBits>)) -> Result<Kv> {
        Ok(Kv { k: Seq::from_named(arrays, "keys", q.0)?, v: Seq::from_named(arrays, "values", q.1)? })
    }
}

/// When and how a KV cache quantizes itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvQuant {
    /// Keys (None: kept dense).
    pub k: Option<QBits>,
    /// Values (None: kept dense).
    pub v: Option<QBits>,
    /// Quantize once this many tokens are cached (mlx-lm's `quantized_kv_start`).
    pub start: i64,
}

impl KvQuant {
    /// Whether a cache holding `offset` tokens should be quantized now. As in
    /// mlx-lm the check follows a model call, so the first call attends densely.
    pub fn due(&self, offset: i64) -> bool {
        (self.k.is_some() || self.v.is_some()) && offset > 0 && offset >= self.start
    }
}
