//! Rotary position embeddings with the scalings checkpoints declare.

use crate::fast::{rope, RopeOffset};
use crate::{Array, Error, Result};

/// A `rope_scaling` entry of a config.
#[derive(Debug, Clone, PartialEq)]
pub enum RopeScaling {
    /// Plain rope.
    None,
    /// Positions divided by `factor`.
    Linear {
        /// factor
        factor: f32,
    },
    /// Only the first `partial_rotary_factor` of the features rotate, with
    /// periods over the whole head (`factor · base^(2i/dims)`); the rest
    /// stay put (Gemma 4's global layers).
    Proportional {
        /// fraction of the features that rotate
        partial_rotary_factor: f32,
        /// frequency factor
        factor: f32,
    },
    /// LongRoPE / Su scaling (Phi-3 and its long-context kin): every period
    /// stretched by its own `long_factor`, and the rotated features scaled
    /// by `mscale` first.
    LongRope {
        /// one factor per rotated pair
        long_factor: Vec<f32>,
        /// magnitude scale of the rotated features
        mscale: f32,
    },
    /// YaRN: periods interpolated by `factor` below a band of frequencies,
    /// kept above it, blended linearly inside it (the band from the
    /// rotation counts `beta_fast` and `beta_slow` within the original
    /// context); the rotated features scaled by the ratio of the two
    /// magnitude corrections `mscale` and `mscale_all_dim` first.
    Yarn {
        /// context stretch
        factor: f32,
        /// the context the model was trained at before the stretch
        original_max_position_embeddings: f32,
        /// rotations over the original context above which periods are kept
        beta_fast: f32,
        /// rotations below which periods are fully interpolated
        beta_slow: f32,
        /// magnitude correction of the rotated features
        mscale: f32,
        /// the correction it is taken relative to (0: none)
        mscale_all_dim: f32,
    },
    /// Dynamic NTK scaling (mlx-lm's `DynamicNTKScalingRoPE`): each call
    /// whose positions end at `n` past `max_position_embeddings` ropes with
    /// the base grown to `base · (factor·n/max − (factor − 1))^(dims/(dims−2))`;
    /// shorter ones with the base as is.
    Dynamic {
        /// factor
        factor: f32,
        /// the context up to which the base stays as is
        max_position_embeddings: i32,
    },
    /// Llama 3's frequency-dependent scaling.
    Llama3 {
        /// factor
        factor: f32,
        /// low_freq_factor
        low_freq_factor: f32,
        /// high_freq_factor
        high_freq_factor: f32,
        /// original_max_position_embeddings
        original_max_position_embeddings: f32,
    },
}

/// YaRN's periods of the `dims / 2` rotated pairs and its magnitude scale
/// of the rotated features (1: none), for `scaling` (a
/// [`RopeScaling::Yarn`]). The band edges and scales are worked in f64, the
/// periods rounded to f32 at the end.
fn yarn(dims: i32, base: f32, scaling: &RopeScaling) -> (Vec<f32>, f32) {
    let RopeScaling::Yarn { factor, original_max_position_embeddings, beta_fast, beta_slow, mscale, mscale_all_dim } =
        *scaling
    else {
        unreachable!("yarn() takes a yarn scaling")
    };
    let (d, base, factor) = (dims as f64, base as f64, factor as f64);
    // The pair index at which a period fits `rotations` times into the original context.
    let pair_of = |rotations: f32| {
        let period = original_max_position_embeddings as f64 / (rotations as f64 * 2.0 * std::f64::consts::PI);
        d * period.ln() / (2.0 * base.ln())
    };
    let low = pair_of(beta_fast).floor().max(0.0);
    let mut high = pair_of(beta_slow).ceil().min(d - 1.0);
    if low == high {
        high += 0.001; // a band of width 0 would divide by 0
    }
    let correction = |m: f32| if factor <= 1.0 { 1.0 } else { 0.1 * m as f64 * factor.ln() + 1.0 };
    let mscale = correction(mscale) / correction(mscale_all_dim);
    let f = (0..dims / 2)
        .map(|i| {
            let kept = base.powf((2 * i) as f64 / d);
            let stretched = factor * kept;
            // 1 below the band (periods kept), 0 above it (stretched).
            let keep = 1.0 - ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
            (stretched * kept / (stretched * keep + kept * (1.0 - keep))) as f32
        })
        .collect();
    (f, mscale as f32)
}

/// A rotary embedding over the first `dims` features.
#[derive(Debug, Clone)]
pub struct Rope {
    dims: i32,
    traditional: bool,
    base: f32,
    scale: f32,
    freqs: Option<Array>,
    /// Scale of the rotated features before rotating (LongRoPE's mscale).
    mscale: Option<f32>,
    /// Dynamic NTK's factor and context (see [`RopeScaling::Dynamic`]).
    ntk: Option<(f32, i32)>,
}

impl Rope {
    /// A rope rotating the first `dims` features of each head (fewer than
    /// the head dim for a partial rope; the rest pass through), with base
    /// period `base`, interleaved pairs when `traditional` (else halves),
    /// and `scaling`; the scaling's frequencies are computed once here.
    pub fn new(dims: i32, base: f32, traditional: bool, scaling: &RopeScaling) -> Result<Rope> {
        let mut r = Rope { dims, traditional, base, scale: 1.0, freqs: None, mscale: None, ntk: None };
        let periods = |f: Vec<f32>| Array::from_slice(&f, &[f.len() as i32]);
        match scaling {
            RopeScaling::None => {}
            RopeScaling::Linear { factor } => r.scale = 1.0 / factor,
            RopeScaling::Proportional { partial_rotary_factor, factor } => {
                // The first `rotated` features rotate with periods θ^(2i/dims)
                // (exponents over the whole head); the rest get infinite
                // periods, i.e. stay put.
                let rotated = (dims as f32 * partial_rotary_factor) as i32;
                if rotated > dims || rotated < 0 {
                    return Err(Error::msg("rope: partial_rotary_factor must be in [0, 1]"));
                }
                let mut f: Vec<f32> =
                    (0..rotated / 2).map(|i| factor * base.powf((2 * i) as f32 / dims as f32)).collect();
                f.extend(std::iter::repeat_n(f32::INFINITY, ((dims - rotated) / 2) as usize));
                r.freqs = Some(periods(f)?);
            }
            RopeScaling::LongRope { long_factor, mscale } => {
                if long_factor.len() != (dims / 2) as usize {
                    return Err(Error::msg(format!(
                        "rope_scaling.long_factor has {} entries, the rotated features need {}",
                        long_factor.len(),
                        dims / 2
                    )));
                }
                let f = (0..dims / 2).map(|i| long_factor[i as usize] * base.powf((2 * i) as f32 / dims as f32));
                r.freqs = Some(periods(f.collect())?);
                r.mscale = Some(*mscale);
            }
            RopeScaling::Yarn { .. } => {
                let (f, mscale) = yarn(dims, base, scaling);
                r.freqs = Some(periods(f)?);
                r.mscale = (mscale != 1.0).then_some(mscale);
            }
            RopeScaling::Dynamic { factor, max_position_embeddings } => {
                if *max_position_embeddings < 1 || dims < 3 {
                    return Err(Error::msg("rope_scaling: dynamic needs max_position_embeddings and more than 2 dims"));
                }
                r.ntk = Some((*factor, *max_position_embeddings));
            }
            RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position_embeddings } => {
                if high_freq_factor == low_freq_factor {
                    return Err(Error::msg("rope_scaling: high_freq_factor equals low_freq_factor"));
                }
                let old = *original_max_position_embeddings;
                let low_wl = old / low_freq_factor;
                let high_wl = old / high_freq_factor;
                let f: Vec<f32> = (0..dims / 2)
                    .map(|i| {
                        let freq = base.powf((2 * i) as f32 / dims as f32);
                        let wl = 2.0 * std::f32::consts::PI * freq;
                        let freq = if wl > low_wl { freq * factor } else { freq };
                        if wl > high_wl && wl < low_wl {
                            let s = (old / wl - low_freq_factor) / (high_freq_factor - low_freq_factor);
                            freq / ((1.0 - s) / factor + s)
                        } else {
                            freq
                        }
                    })
                    .collect();
                r.freqs = Some(periods(f)?);
            }
        }
        Ok(r)
    }

    /// No rotation at all: layers that attend without positions (SmolLM3's
    /// and Cohere 2's no-rope layers) use it where others use a rope.
    pub fn none() -> Rope {
        Rope { dims: 0, traditional: false, base: 0.0, scale: 1.0, freqs: None, mscale: None, ntk: None }
    }

    /// Whether it rotates anything ([`Rope::none`] does not).
    pub fn rotates(&self) -> bool {
        self.dims > 0
    }

    /// Custom per-pair periods (as `fast::rope`'s `freqs`).
    pub fn with_freqs(dims: i32, traditional: bool, freqs: Array) -> Rope {
        Rope { dims, traditional, base: 0.0, scale: 1.0, freqs: Some(freqs), mscale: None, ntk: None }
    }

    /// Rotates `x` (`[B, H, L, D]`) for positions starting at `offset`.
    pub fn forward(&self, x: &Array, offset: RopeOffset<'_>) -> Result<Array> {
        if self.dims == 0 {
            return Ok(x.clone());
        }
        let scaled;
        let x = match self.mscale {
            Some(m) if self.dims == x.dim(-1) => {
                scaled = x.mul_s(m as f64)?;
                &scaled
            }
            Some(m) => {
                let d = x.dim(-1);
                scaled = crate::concatenate(
                    &[&x.slice_axis(-1, 0, self.dims)?.mul_s(m as f64)?, &x.slice_axis(-1, self.dims, d)?],
                    -1,
                )?;
                &scaled
            }
            None => x,
        };
        match &self.freqs {
            Some(f) => rope(x, self.dims, self.traditional, None, self.scale, offset, Some(f)),
            None => match self.ntk {
                Some(ntk) => self.forward_ntk(x, offset, ntk),
                None => rope(x, self.dims, self.traditional, Some(self.base), self.scale, offset, None),
            },
        }
    }

    /// Dynamic NTK's base for positions that end at `end` (worked in f64 as
    /// mlx-lm does in Python, rounded to f32 at the end).
    fn ntk_base(&self, (factor, max): (f32, i32), end: i64) -> f32 {
        let (f, max, d) = (factor as f64, max as f64, self.dims as f64);
        let n = (end as f64).max(max);
        (self.base as f64 * (f * n / max - (f - 1.0)).powf(d / (d - 2.0))) as f32
    }

    /// [`Rope::forward`] under dynamic NTK scaling: the base from where this
    /// call's positions end, per row when the rows' offsets differ.
    fn forward_ntk(&self, x: &Array, offset: RopeOffset<'_>, ntk: (f32, i32)) -> Result<Array> {
        let l = x.dim(-2) as i64;
        let one = |x: &Array, off: i32| {
            let base = self.ntk_base(ntk, l + off as i64);
            rope(x, self.dims, self.traditional, Some(base), self.scale, RopeOffset::Int(off), None)
        };
        let offs = match offset {
            RopeOffset::Int(off) => return one(x, off),
            RopeOffset::Array(a) => a.to_vec::<i32>()?,
        };
        if offs.iter().all(|&o| l + o as i64 <= ntk.1 as i64) {
            return rope(x, self.dims, self.traditional, Some(self.base), self.scale, offset, None);
        }
        let rows = (0..offs.len() as i32)
            .map(|b| one(&x.slice_axis(0, b, b + 1)?, offs[b as usize]))
            .collect::<Result<Vec<_>>>()?;
        crate::concatenate(&rows.iter().collect::<Vec<_>>(), 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yarn_scaling(factor: f32, original: f32, mscale: f32, mscale_all_dim: f32) -> RopeScaling {
        let (beta_fast, beta_slow) = (32.0, 1.0);
        RopeScaling::Yarn {
            factor,
            original_max_position_embeddings: original,
            beta_fast,
            beta_slow,
            mscale,
            mscale_all_dim,
        }
    }

    #[test]
    fn yarn_periods_and_scale_are_mlx_lms() {
        // (dims, base, scaling, mlx-lm 0.32.2's YarnRoPE `_freqs` and `mscale`)
        let cases = [
            (
                16,
                10000.0,
                yarn_scaling(40.0, 4096.0, 0.707, 0.0),
                vec![1.0, 3.1622777, 10.0, 41.81524, 195.12195, 1176.6614, 40000.0, 126491.1],
                1.2608038,
            ),
            (8, 1e6, yarn_scaling(4.0, 16.0, 1.0, 1.0), vec![1.0, 126.4911, 4000.0, 126491.11], 1.0),
        ];
        for (dims, base, scaling, want, want_mscale) in cases {
            let (got, mscale) = yarn(dims, base, &scaling);
            for (g, w) in got.iter().zip(&want) {
                assert!((g - w).abs() <= 1e-6 * w, "{scaling:?}: period {g}, mlx-lm {w}");
            }
            assert!((mscale - want_mscale).abs() < 1e-6, "{scaling:?}: mscale {mscale}, mlx-lm {want_mscale}");
            let rope = Rope::new(dims, base, false, &scaling).unwrap();
            assert_eq!(rope.mscale, (want_mscale != 1.0).then_some(mscale));
        }
    }
}
