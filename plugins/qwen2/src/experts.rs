//! Hugging Face checkpoints store each expert's projections on their own
//! (`{mlp}.experts.{e}.{gate,up,down}_proj.*`); the shared MoE layer reads
//! them stacked, as mlx-lm's `sanitize` leaves them
//! (`{mlp}.switch_mlp.{gate,up,down}_proj.*`). [`PerExpert`] offers the
//! stacked names over a checkpoint of either layout.

use mlx::nn::{Kind, Parallel, Problem, Weights};
use mlx::quant::QuantSpec;
use mlx::{Array, Result};
use std::collections::HashMap;

const PROJECTIONS: [&str; 3] = ["gate_proj", "up_proj", "down_proj"];
const PARTS: [&str; 3] = ["weight", "scales", "biases"];

/// Weights with one MoE block's per-expert tensors offered stacked (see
/// the module documentation); every other name reads through.
pub struct PerExpert<'a> {
    inner: &'a dyn Weights,
    stacked: HashMap<String, Array>,
    quant: HashMap<String, QuantSpec>,
}

impl<'a> PerExpert<'a> {
    /// `w` with the experts under `mlp` stacked when it stores them one by
    /// one (nothing to stack when it has `switch_mlp` already, or no
    /// expert 0: the layer then names what is missing).
    pub fn stacked(w: &'a dyn Weights, mlp: &str) -> Result<PerExpert<'a>> {
        let mut out = PerExpert { inner: w, stacked: HashMap::new(), quant: HashMap::new() };
        if w.get(&format!("{mlp}.experts.0.gate_proj.weight")).is_none() {
            return Ok(out);
        }
        for proj in PROJECTIONS {
            let into = format!("{mlp}.switch_mlp.{proj}");
            for part in PARTS {
                let each: Vec<Array> =
                    (0..).map_while(|e| w.get(&format!("{mlp}.experts.{e}.{proj}.{part}"))).collect();
                if !each.is_empty() {
                    out.stacked.insert(format!("{into}.{part}"), mlx::stack(&each.iter().collect::<Vec<_>>(), 0)?);
                }
            }
            if let Some(q) = w.quant(&format!("{mlp}.experts.0.{proj}")) {
                out.quant.insert(into, q);
            }
        }
        Ok(out)
    }
}

impl Weights for PerExpert<'_> {
    fn get(&self, name: &str) -> Option<Array> {
        self.stacked.get(name).cloned().or_else(|| self.inner.get(name))
    }
    fn quant(&self, prefix: &str) -> Option<QuantSpec> {
        self.quant.get(prefix).cloned().or_else(|| self.inner.quant(prefix))
    }
    /// Names not stacked here are checked by the store underneath, so a
    /// checking store still gathers every problem of the load.
    fn tensor(&self, name: &str, shape: &[i32], kind: Kind) -> Result<Array> {
        match self.stacked.get(name) {
            Some(t) => match mlx::nn::mismatch(name, t, shape, kind) {
                Some(p) => Err(mlx::Error::new(p.kind(), p.to_string())),
                None => Ok(t.clone()),
            },
            None => self.inner.tensor(name, shape, kind),
        }
    }
    fn report(&self, problem: Problem) {
        self.inner.report(problem)
    }
    fn parallel(&self) -> Option<Parallel> {
        self.inner.parallel()
    }
    fn slice(&self, name: &str, axis: i32, start: i32, stop: i32) -> Result<Option<Array>> {
        match self.stacked.get(name) {
            Some(t) => t.slice_axis(axis, start, stop).map(Some),
            None => self.inner.slice(name, axis, start, stop),
        }
    }
}
