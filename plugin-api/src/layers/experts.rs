//! Hugging Face checkpoints of most MoE families store each expert's
//! projections on their own (`{moe}.experts.{e}.{name}.*`), while the
//! shared experts ([`mlx::nn::SwitchGlu`], [`super::SparseMoe`]) read them
//! stacked, as mlx-lm's `sanitize` leaves them
//! (`{moe}.switch_mlp.{gate,up,down}_proj.*`). [`PerExpert`] offers the
//! stacked names over a checkpoint of either layout.

use mlx::nn::{Kind, Parallel, Problem, Weights};
use mlx::quant::QuantSpec;
use mlx::{Array, Error, ErrorKind, Result};
use std::collections::HashMap;

/// Weights with one MoE block's per-expert tensors offered stacked; every
/// other name reads through.
pub struct PerExpert<'a> {
    inner: &'a dyn Weights,
    stacked: HashMap<String, Array>,
    quant: HashMap<String, QuantSpec>,
}

impl<'a> PerExpert<'a> {
    /// Hugging Face's per-expert names in most families (Qwen-MoE, OLMoE),
    /// each with the `switch_mlp` name it is stacked under.
    pub const GATE_UP_DOWN: [(&'static str, &'static str); 3] =
        [("gate_proj", "gate_proj"), ("up_proj", "up_proj"), ("down_proj", "down_proj")];

    /// `w` with the `experts` experts under `moe` stacked, each
    /// `{moe}.experts.{e}.{from}.*` of `names` into `{moe}.switch_mlp.{into}.*`,
    /// when `w` stores them one by one (else nothing is stacked: the layer
    /// reads `switch_mlp` and names what is missing). A missing expert is
    /// an error naming it.
    pub fn stacked(w: &'a dyn Weights, moe: &str, experts: i32, names: &[(&str, &str)]) -> Result<PerExpert<'a>> {
        let mut out = PerExpert { inner: w, stacked: HashMap::new(), quant: HashMap::new() };
        let Some((first, _)) = names.first() else { return Ok(out) };
        if w.get(&format!("{moe}.experts.0.{first}.weight")).is_none() {
            return Ok(out);
        }
        for (from, into) in names {
            let into = format!("{moe}.switch_mlp.{into}");
            for part in ["weight", "scales", "biases"] {
                let name = |e: i32| format!("{moe}.experts.{e}.{from}.{part}");
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
            if let Some(q) = w.quant(&format!("{moe}.experts.0.{from}")) {
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
                Some(p) => Err(Error::new(p.kind(), p.to_string())),
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
