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
}

impl Rope {
    /// A rope rotating the first `dims` features of each head (fewer than
    /// the head dim for a partial rope; the rest pass through), with base
    /// period `base`, interleaved pairs when `traditional` (else halves),
    /// and `scaling`; the scaling's frequencies are computed once here.
    pub fn new(dims: i32, base: f32, traditional: bool, scaling: &RopeScaling) -> Result<Rope> {
        let mut r = Rope { dims, traditional, base, scale: 1.0, freqs: None, mscale: None };
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
        Rope { dims: 0, traditional: false, base: 0.0, scale: 1.0, freqs: None, mscale: None }
    }

    /// Whether it rotates anything ([`Rope::none`] does not).
    pub fn rotates(&self) -> bool {
        self.dims > 0
    }

    /// Custom per-pair periods (as `fast::rope`'s `freqs`).
    pub fn with_freqs(dims: i32, traditional: bool, freqs: Array) -> Rope {
        Rope { dims, traditional, base: 0.0, scale: 1.0, freqs: Some(freqs), mscale: None }
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
            None => rope(x, self.dims, self.traditional, Some(self.base), self.scale, offset, None),
        }
    }
}
