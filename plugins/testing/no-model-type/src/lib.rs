//! A well-formed plugin (right stamps, a root module) whose one family,
//! `nomodeltype`, claims no `model_type`. Such a family could never be chosen,
//! so the host must refuse the plugin, naming the family.

use mlx::nn::Weights;
use mlx::{Error, Result};
use plugin_api::ModelPlan;
use plugin_api::{Family, Model};
use serde_json::Value;

/// The family.
pub struct NoModelTypeFamily;

impl Family for NoModelTypeFamily {
    type Config = Value;

    fn name(&self) -> &'static str {
        "nomodeltype"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &[]
    }

    fn plan(&self, _config: &Value, _raw: &Value) -> Result<ModelPlan> {
        Err(Error::msg("nomodeltype plugin: never planned"))
    }

    fn build(&self, _config: &Value, _plan: &ModelPlan, _w: &dyn Weights) -> Result<Box<dyn Model>> {
        Err(Error::msg("nomodeltype plugin: never built"))
    }
}

plugin_api::export_plugin!("famlx-testplugin-no-model-type", [NoModelTypeFamily]);
