//! A well-formed plugin whose family claims `model_type: panicky`, plans any
//! config, and panics in `build`. The adapter in `plugin_api::family` must
//! turn the panic into an error so the host reports it and keeps running.

use mlx::nn::Weights;
use mlx::Result;
use plugin_api::{CacheKind, ModelPlan};
use plugin_api::{Family, Model};
use serde_json::Value;

/// The message the panic carries (tests look for it).
pub const PANIC_MESSAGE: &str = "panicky plugin: build always panics";

/// The family.
pub struct PanickyFamily;

impl Family for PanickyFamily {
    /// Any config.
    type Config = Value;

    fn name(&self) -> &'static str {
        "panicky"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["panicky"]
    }

    fn plan(&self, _config: &Value, config: &Value) -> Result<ModelPlan> {
        Ok(ModelPlan::text("panicky", "panicky", config, vec![CacheKind::Full], 512, 64)?.with_dtype("float32"))
    }

    fn build(&self, _config: &Value, _plan: &ModelPlan, _w: &dyn Weights) -> Result<Box<dyn Model>> {
        panic!("{PANIC_MESSAGE}");
    }
}

plugin_api::export_plugin!("famlx-testplugin-panicky", [PanickyFamily]);
