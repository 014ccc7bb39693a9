//! A well-formed plugin whose family claims `model_type: wrongshape`, plans
//! and builds a Llama-style decoder from the shared layers (like the reload
//! test plugins), but whose forward drops the last vocabulary column of the
//! logits. The host must report the shape mismatch as an error naming the
//! plugin and both shapes, not panic or read out of bounds.

#[path = "../../common/decoder.rs"]
mod decoder;

use mlx::nn::Weights;
use mlx::Result;
use plugin_api::layers::DecoderLm;
use plugin_api::ModelPlan;
use plugin_api::{Caches, Family, Input, Model, Output};
use serde_json::Value;

/// The family.
pub struct WrongShapeFamily;

struct Truncated {
    inner: DecoderLm,
}

impl Model for Truncated {
    fn forward(&mut self, input: &Input, caches: &mut Caches<'_>) -> Result<Output> {
        let mut out = self.inner.forward(input, caches)?;
        if let Some(l) = out.logits.take() {
            // `[B, L, V]` → `[B, L, V - 1]`.
            out.logits = Some(l.slice_axis(-1, 0, l.dim(-1) - 1)?);
        }
        Ok(out)
    }
}

impl Family for WrongShapeFamily {
    type Config = decoder::Config;

    fn name(&self) -> &'static str {
        "wrongshape"
    }
    fn model_types(&self) -> &'static [&'static str] {
        &["wrongshape"]
    }
    fn plan(&self, c: &decoder::Config, raw: &Value) -> Result<ModelPlan> {
        decoder::plan("wrongshape", c, raw)
    }
    fn build(&self, c: &decoder::Config, _plan: &ModelPlan, w: &dyn Weights) -> Result<Box<dyn Model>> {
        Ok(Box::new(Truncated { inner: decoder::build(c, w)? }))
    }
}

plugin_api::export_plugin!("famlx-testplugin-wrong-shape", [WrongShapeFamily]);
