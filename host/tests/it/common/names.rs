//! Helpers of the weight-name-rule tests (`*_names.rs`): a fixture's plan
//! and what `rewrite` turns one tensor into.

use mlx::Array;
use plugin_api::family::Family;
use plugin_api::ModelPlan;

/// The plan `family` makes of fixture `dir`'s config.json.
pub fn fixture_plan<F: Family>(family: &F, dir: &str) -> ModelPlan {
    let path = super::fixture(dir).join("config.json");
    let raw: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    family.plan(&family.config(&raw).unwrap(), &raw).unwrap()
}

/// The typed config `plan` carries, as `family` parses it.
pub fn config<F: Family>(family: &F, plan: &ModelPlan) -> F::Config {
    family.config(&serde_json::from_str(plan.config.as_str()).unwrap()).unwrap()
}

/// The names (and shapes) `rewrite` turns one tensor into.
pub fn rewritten<F: Family>(family: &F, plan: &ModelPlan, name: &str, t: Array) -> Vec<(String, Vec<i32>)> {
    let cfg = config(family, plan);
    family.rewrite(&cfg, plan, name, t).unwrap().into_iter().map(|(n, t)| (n, t.shape().to_vec())).collect()
}

/// Zeros of `shape` (f32).
pub fn zeros(shape: &[i32]) -> Array {
    mlx::zeros(shape, mlx::Dtype::F32).unwrap()
}
