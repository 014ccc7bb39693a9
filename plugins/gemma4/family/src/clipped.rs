//! Gemma 4's clippable linear (the towers' `ClippableLinear`): a linear
//! whose input and output are clipped to bounds stored beside it.

use mlx::nn::{Kind, Linear, Weights};
use mlx::{Array, Result};

/// A linear that clips its input and output to bounds stored beside it
/// (`input_min` ... `output_max`, 0-d, kept in their stored dtype so the
/// arithmetic promotes as the reference's does).
#[derive(Debug, Clone)]
pub struct ClippedLinear {
    linear: Linear,
    input: Option<(Array, Array)>,
    output: Option<(Array, Array)>,
}

impl ClippedLinear {
    /// Loads `{p}.linear` (`i` → `o`) and, when `clipped`, its four bounds
    /// (all required).
    pub fn load(w: &dyn Weights, p: &str, i: i32, o: i32, clipped: bool) -> Result<ClippedLinear> {
        let bounds = |a: &str, b: &str| -> Result<Option<(Array, Array)>> {
            if !clipped {
                return Ok(None);
            }
            Ok(Some((
                w.tensor(&format!("{p}.{a}"), &[], Kind::Float)?,
                w.tensor(&format!("{p}.{b}"), &[], Kind::Float)?,
            )))
        };
        Ok(ClippedLinear {
            linear: Linear::load(w, &format!("{p}.linear"), i, o)?,
            input: bounds("input_min", "input_max")?,
            output: bounds("output_min", "output_max")?,
        })
    }

    /// [`ClippedLinear::load`] clipping where the checkpoint stores bounds
    /// (the audio tower's linears always clip; a checkpoint without the
    /// buffers leaves them at ±inf, i.e. no clipping).
    pub fn load_bounds_if_present(w: &dyn Weights, p: &str, i: i32, o: i32) -> Result<ClippedLinear> {
        let clipped = w.get(&format!("{p}.input_min")).is_some();
        ClippedLinear::load(w, p, i, o, clipped)
    }

    /// Clip, project, clip.
    pub fn forward(&self, x: &Array) -> Result<Array> {
        let x = match &self.input {
            Some((lo, hi)) => x.clip(Some(lo), Some(hi))?,
            None => x.clone(),
        };
        let y = self.linear.forward(&x)?;
        match &self.output {
            Some((lo, hi)) => y.clip(Some(lo), Some(hi)),
            None => Ok(y),
        }
    }
}
