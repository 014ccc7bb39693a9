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
}

impl Rope {
    /// Builds the rope; the scaling's frequencies are computed once here.
    pub fn new(dims: i32, base: f32, traditional: bool, scaling: &RopeScaling) -> Result<Rope> {
        let mut r = Rope { dims, traditional, base, scale: 1.0, freqs: None };
        match scaling {
            RopeScaling::None => {}
            RopeScaling::Linear { factor } => r.scale = 1.0 / factor,
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
                r.freqs = Some(Array::from_slice(&f, &[f.len() as i32])?);
            }
        }
        Ok(r)
    }

    /// Custom per-pair periods (as `fast::rope`'s `freqs`).
    pub fn with_freqs(dims: i32, traditional: bool, freqs: Array) -> Rope {
        Rope { dims, traditional, base: 0.0, scale: 1.0, freqs: Some(freqs) }
    }

    /// Rotates `x` (`[B, H, L, D]`) for positions starting at `offset`.
    pub fn forward(&self, x: &Array, offset: RopeOffset<'_>) -> Result<Array> {
        match &self.freqs {
            Some(f) => rope(x, self.dims, self.traditional, None, self.scale, offset, Some(f)),
            None => rope(x, self.dims, self.traditional, Some(self.base), self.scale, offset, None),
        }
    }
}
