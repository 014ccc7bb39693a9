//! The gemma3 family: the text model of Gemma 3's multimodal checkpoints
//! (4B, 12B, 27B), which is [`crate::gemma3_text`]'s decoder with its
//! tensors under `language_model.` and its config in `text_config`. As
//! mlx-lm's `gemma3`, the checkpoint's own `vocab_size` (default 262208)
//! replaces the text config's, whose head counts default to 8 query and 4
//! key/value heads. The vision tower and its projector are dropped
//! unread, as mlx-lm's `sanitize` drops them: this family takes text only.
//!
//! GGUF files of llama.cpp's `gemma3` architecture (Gemma 3's text model,
//! 1B included) come here too, by their model type (`gguf.rs`).

use crate::gemma3_text::Config;
use mlx::nn::Weights;
use mlx::{Array, Error, Result};
use plugin_api::config::{eos_ids, field_or, parse, text_config};
use plugin_api::layers::LmDrafter;
use plugin_api::{DraftRole, Fusion, ModelInfo, ModelPlan};
use plugin_api::{Drafter, Family, FamilyConfig, Model};
use serde::Deserialize;
use serde_json::{json, Value};

/// Where the text model's tensors live.
const PREFIX: &str = "language_model.";

/// The parts of the checkpoint no text model reads.
const MEDIA: &[&str] = &["vision_tower.", "multi_modal_projector."];

/// config.json as this family reads it: the text model's config alone.
#[derive(Deserialize)]
struct Checkpoint {
    text_config: Config,
}

/// The family registration.
pub struct Gemma3Family;

impl Family for Gemma3Family {
    type Config = Config;

    fn name(&self) -> &'static str {
        "gemma3"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["gemma3"]
    }

    fn catalog(&self) -> Vec<ModelInfo> {
        vec![ModelInfo::text("gemma3")
            .examples(&["google/gemma-3-4b-it", "google/gemma-3-27b-it"])
            .sliding()
            .gguf("gemma3")]
    }

    /// `text_config`, with the checkpoint's vocabulary and mlx-lm's head
    /// counts filled in; errors name the field as `text_config.{field}`.
    fn config(&self, raw: &Value) -> Result<Config> {
        if plugin_api::gguf::is_gguf(raw) {
            return crate::gguf::config(raw);
        }
        let mut text = raw.get("text_config").cloned().unwrap_or(Value::Null);
        if let Some(t) = text.as_object_mut() {
            t.insert("vocab_size".into(), json!(field_or::<i64>(raw, "vocab_size", 262208)?));
            for (field, heads) in [("num_attention_heads", 8), ("num_key_value_heads", 4)] {
                if t.get(field).is_none_or(Value::is_null) {
                    t.insert(field.into(), json!(heads));
                }
            }
        }
        let cfg = parse::<Checkpoint>(&json!({ "text_config": text }))?.text_config;
        cfg.check().map_err(|e| Error { msg: e.msg.replace("field `", "field `text_config."), ..e })?;
        Ok(cfg)
    }

    fn plan(&self, cfg: &Config, config: &Value) -> Result<ModelPlan> {
        // The checkpoint's config, so the plan's parses back through `config`.
        let mut stored = config.clone();
        if let Some(o) = stored.as_object_mut() {
            o.retain(|k, _| !k.starts_with("quantization"));
        }
        let text = text_config(config);
        let mut eos = eos_ids(config);
        if eos.is_empty() {
            eos = eos_ids(text);
        }
        let dtype = field_or::<String>(config, "torch_dtype", field_or(text, "torch_dtype", "bfloat16".into())?)?;
        Ok(ModelPlan::text("gemma3", "gemma3", &stored, cfg.caches(), cfg.vocab_size, cfg.hidden_size)?
            .with_eos(eos)
            .with_context(cfg.context()?)
            .with_dtype(&dtype)
            .with_head_dims(&[cfg.head_dim]))
    }

    /// Drops the vision tower and its projector.
    fn rewrite(&self, _cfg: &Config, _plan: &ModelPlan, name: &str, t: Array) -> Result<Vec<(String, Array)>> {
        let (name, t) = crate::gguf::tensor(name, t)?;
        let name = name.as_str();
        if MEDIA.iter().any(|m| name.starts_with(m)) {
            return Ok(vec![]);
        }
        Ok(vec![(name.to_string(), t)])
    }

    /// One matmul for q/k/v and one for gate/up per layer.
    fn fusions(&self, cfg: &Config, _plan: &ModelPlan) -> Vec<Fusion> {
        cfg.fusions(PREFIX)
    }

    /// A separate checkpoint of this family drafts as a small LM (`--draft-model`).
    fn build_drafter(
        &self,
        role: DraftRole,
        cfg: &Config,
        plan: &ModelPlan,
        w: &dyn Weights,
        _target_plan: &ModelPlan,
        _target: &dyn Weights,
    ) -> Result<Option<Box<dyn Drafter>>> {
        LmDrafter::for_separate_checkpoint(role, plan, || self.build(cfg, plan, w))
    }

    fn build(&self, cfg: &Config, _plan: &ModelPlan, w: &dyn Weights) -> Result<Box<dyn Model>> {
        Ok(Box::new(cfg.load(w, PREFIX)?))
    }
}
