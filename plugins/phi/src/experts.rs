//! Phi-3.5-MoE's Hugging Face checkpoints keep each expert on its own
//! (`{moe}.experts.{e}.{w1,w3,w2}.*`); the shared MoE layer reads them
//! stacked as mlx-lm's `sanitize` leaves them
//! (`{moe}.switch_mlp.{gate,up,down}_proj.*`). [`Stacked`] offers the
//! stacked names over a checkpoint of either layout.

use mlx::nn::{Parallel, Weights};
use mlx::quant::QuantSpec;
use mlx::{Array, Error, ErrorKind, Result};
use std::collections::HashMap;

/// Hugging Face's name of each projection, and mlx-lm's.
const NAMES: [(&str, &str); 3] = [("w1", "gate_proj"), ("w3", "up_proj"), ("w2", "down_proj")];

/// Weights with one MoE block's per-expert tensors offered stacked; every
/// other name reads through.
pub struct Stacked<'a> {
    inner: &'a dyn Weights,
    stacked: HashMap<String, Array>,
    quant: HashMap<String, QuantSpec>,
}

impl<'a> Stacked<'a> {
    /// `w` with the `experts` experts under `moe` stacked when it stores
    /// them one by one (else nothing to stack: the layer reads `switch_mlp`
    /// and names what is missing). A missing expert is an error naming it.
    pub fn new(w: &'a dyn Weights, moe: &str, experts: i32) -> Result<Stacked<'a>> {
        let mut out = Stacked { inner: w, stacked: HashMap::new(), quant: HashMap::new() };
        if w.get(&format!("{moe}.experts.0.w1.weight")).is_none() {
            return Ok(out);
        }
        for (hf, proj) in NAMES {
            let into = format!("{moe}.switch_mlp.{proj}");
            for part in ["weight", "scales", "biases"] {
                let name = |e: i32| format!("{moe}.experts.{e}.{hf}.{part}");
                if w.get(&name(0)).is_none() {
                    continue;
                }
                let each = (0..experts)
                    .map(|e| {
                        w.get(&name(e))
                            .ok_or_else(|| Error::new(ErrorKind::MissingWeight, format!("missing weight {}", name(e))))
                    })
                    .collect::<Result<Vec<_>>>()?;
                out.stacked.insert(format!("{into}.{part}"), mlx::stack(&each.iter().collect::<Vec<_>>(), 0)?);
            }
            if let Some(q) = w.quant(&format!("{moe}.experts.0.{hf}")) {
                out.quant.insert(into, q);
            }
        }
        Ok(out)
    }
}

impl Weights for Stacked<'_> {
    fn get(&self, name: &str) -> Option<Array> {
        self.stacked.get(name).cloned().or_else(|| self.inner.get(name))
    }
    fn quant(&self, prefix: &str) -> Option<QuantSpec> {
        self.quant.get(prefix).cloned().or_else(|| self.inner.quant(prefix))
    }
    /// Names not stacked here are checked by the store underneath, so a
    /// checking store still gathers every problem of the load.
    fn tensor(&self, name: &str, shape: &[i32], kind: mlx::nn::Kind) -> Result<Array> {
        match self.stacked.get(name) {
            Some(t) => match mlx::nn::mismatch(name, t, shape, kind) {
                Some(p) => Err(Error::new(p.kind(), p.to_string())),
                None => Ok(t.clone()),
            },
            None => self.inner.tensor(name, shape, kind),
        }
    }
    fn report(&self, problem: mlx::nn::Problem) {
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
