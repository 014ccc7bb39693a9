//! Shared body of the hot-reload test plugins (reload-a, reload-b): a
//! Llama-style decoder under the model type `reloadtest`, built from the
//! shared layers. Each crate sets `crate::BIAS`; a build with a bias makes
//! every forward favour that token, so swapping one build for the other gives
//! observably different output.

use mlx::nn::Weights;
use mlx::{Array, Result};
use plugin_api::layers::DecoderLm;
use plugin_api::ModelPlan;
use plugin_api::{Caches, Family, Input, Model, Output};
use serde_json::Value;

/// The family.
pub struct ReloadFamily;

struct Biased {
    inner: DecoderLm,
    token: Option<i32>,
}

impl Model for Biased {
    fn forward(&mut self, input: &Input, caches: &mut Caches<'_>) -> Result<Output> {
        let mut out = self.inner.forward(input, caches)?;
        if let Some(t) = self.token {
            let Some(l) = out.logits.take() else { return Ok(out) };
            let v = l.dim(-1);
            let onehot: Vec<f32> = (0..v).map(|i| if i == t { 1000.0 } else { 0.0 }).collect();
            let bias = Array::from_slice(&onehot, &[v])?.astype(l.dtype())?;
            out.logits = Some(l.add(&bias)?);
        }
        Ok(out)
    }
}

impl Family for ReloadFamily {
    type Config = crate::decoder::Config;

    fn name(&self) -> &'static str {
        "reloadtest"
    }
    fn model_types(&self) -> &'static [&'static str] {
        &["reloadtest"]
    }
    fn plan(&self, c: &crate::decoder::Config, raw: &Value) -> Result<ModelPlan> {
        crate::decoder::plan("reloadtest", c, raw)
    }
    fn build(&self, c: &crate::decoder::Config, _plan: &ModelPlan, w: &dyn Weights) -> Result<Box<dyn Model>> {
        Ok(Box::new(Biased { inner: crate::decoder::build(c, w)?, token: crate::BIAS }))
    }
}
