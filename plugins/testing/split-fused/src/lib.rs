//! A family (`model_type: splitfused`) whose checkpoints store q/k/v as one
//! `qkv_proj` and gate/up as one `gate_up_proj` (Phi-3's layout), and whose
//! rewriter splits them back into the Llama-style decoder's separate
//! modules, asking the host for no fusion. A quantized module split this
//! way must keep its per-module quantization (host/tests/it/model/split_quant.rs).

#[path = "../../common/decoder.rs"]
mod decoder;

use mlx::nn::Weights;
use mlx::{Array, Result};
use plugin_api::ModelPlan;
use plugin_api::{Family, Model};
use serde_json::Value;

/// The family.
pub struct SplitFusedFamily;

impl Family for SplitFusedFamily {
    type Config = decoder::Config;

    fn name(&self) -> &'static str {
        "splitfused"
    }
    fn model_types(&self) -> &'static [&'static str] {
        &["splitfused"]
    }
    fn plan(&self, c: &decoder::Config, raw: &Value) -> Result<ModelPlan> {
        decoder::plan("splitfused", c, raw)
    }
    fn rewrite(&self, c: &decoder::Config, _plan: &ModelPlan, name: &str, t: Array) -> Result<Vec<(String, Array)>> {
        // Rows of a quantized tensor's weight, scales and biases are its
        // output features alike, so one split serves all three.
        let split = |module: &str, parts: &[&str], rows: &[i32]| -> Result<Vec<(String, Array)>> {
            let (_, part) = name.rsplit_once('.').unwrap_or(("", ""));
            let pieces = t.split_at(rows, 0)?;
            Ok(parts.iter().zip(pieces).map(|(p, a)| (format!("{module}.{p}.{part}"), a)).collect())
        };
        if let Some((module, _)) = name.split_once(".qkv_proj.") {
            let q = c.head_dim * c.num_attention_heads;
            let kv = c.head_dim * c.num_key_value_heads;
            return split(module, &["q_proj", "k_proj", "v_proj"], &[q, q + kv]);
        }
        if let Some((module, _)) = name.split_once(".gate_up_proj.") {
            return split(module, &["gate_proj", "up_proj"], &[t.dim(0) / 2]);
        }
        Ok(vec![(name.to_string(), t)])
    }
    fn build(&self, c: &decoder::Config, _plan: &ModelPlan, w: &dyn Weights) -> Result<Box<dyn Model>> {
        Ok(Box::new(decoder::build(c, w)?))
    }
}

plugin_api::export_plugin!("famlx-testplugin-split-fused", [SplitFusedFamily]);
