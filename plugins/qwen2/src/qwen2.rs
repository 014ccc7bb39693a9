//! The qwen2 family (Qwen2, Qwen2.5 and their coder/math variants):
//! Llama's pre-norm decoder with biases on the q/k/v projections; config,
//! weight-name rules and registration.
//!
//! As mlx-lm's `qwen2`, every layer attends to the whole context: the
//! `sliding_window` / `use_sliding_window` fields are not read.
//!
//! Also reads GGUF files of llama.cpp's `qwen2` architecture (`gguf.rs`).

use mlx::nn::{GatedMlp, GluActivation, NormKind, Weights};
use mlx::{Array, Result};
use plugin_api::config::{
    context_length, eos_ids, field_or, implied_head_dim, named_scaling, nullable, one_of, positive_finite, rope,
    DecoderFields,
};
use plugin_api::layers::{
    decoder_fusions, AttentionShape, BlockLayout, DecoderBlock, DecoderLm, DecoderSpec, LmDrafter,
};
use plugin_api::{CacheKind, DraftRole, Fusion, ModelInfo, ModelPlan};
use plugin_api::{Drafter, Family, FamilyConfig, Model};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The config (config.json's fields).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Config {
    pub hidden_size: i32,
    pub num_hidden_layers: i32,
    pub intermediate_size: i32,
    pub num_attention_heads: i32,
    pub num_key_value_heads: i32,
    pub rms_norm_eps: f32,
    pub vocab_size: i32,
    /// Default (absent or `null`): 32768.
    #[serde(default = "default_max_positions", deserialize_with = "max_positions_or_default")]
    pub max_position_embeddings: i32,
    /// Default (absent or `null`): 1e6.
    #[serde(default = "default_rope_theta", deserialize_with = "rope_theta_or_default")]
    pub rope_theta: f32,
    #[serde(default, deserialize_with = "nullable")]
    pub rope_traditional: bool,
    pub rope_scaling: Option<Value>,
    /// Default (absent or `null`): true.
    #[serde(default = "default_tied", deserialize_with = "tied_or_default")]
    pub tie_word_embeddings: bool,
    pub hidden_act: Option<String>,
}

plugin_api::config_defaults! {
    // mlx-lm's qwen2 defaults for what a config leaves out.
    default_max_positions / max_positions_or_default: i32 = 32768;
    default_rope_theta / rope_theta_or_default: f32 = 1_000_000.0;
    default_tied / tied_or_default: bool = true;
}

impl Config {
    /// Features per head: the width split evenly over the query heads.
    fn head_dim(&self) -> Result<i32> {
        implied_head_dim(self.hidden_size, self.num_attention_heads)
    }
}

impl FamilyConfig for Config {
    /// Every field in range, naming the field otherwise.
    fn check(&self) -> Result<()> {
        one_of("hidden_act", self.hidden_act.as_deref(), &["silu", "swish"])?;
        DecoderFields {
            hidden: self.hidden_size,
            layers: self.num_hidden_layers,
            intermediate: self.intermediate_size,
            heads: self.num_attention_heads,
            kv_heads: self.num_key_value_heads,
            head_dim: self.head_dim()?,
            vocab: self.vocab_size,
        }
        .check()?;
        positive_finite("rope_theta", self.rope_theta)?;
        positive_finite("rms_norm_eps", self.rms_norm_eps)?;
        named_scaling("rope_scaling", self.rope_scaling.as_ref(), self.max_position_embeddings)?;
        Ok(())
    }
}

/// The family registration.
pub struct Qwen2Family;

impl Family for Qwen2Family {
    type Config = Config;

    fn name(&self) -> &'static str {
        "qwen2"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["qwen2"]
    }

    fn catalog(&self) -> Vec<ModelInfo> {
        vec![ModelInfo::text("qwen2")
            .examples(&["Qwen/Qwen2.5-7B-Instruct", "mlx-community/Qwen2.5-7B-Instruct-4bit"])
            .gguf("qwen2")]
    }

    /// config.json, or a GGUF file's metadata (architecture `qwen2`).
    fn config(&self, raw: &Value) -> Result<Config> {
        crate::gguf::qwen2_config(raw)
    }

    fn plan(&self, cfg: &Config, config: &Value) -> Result<ModelPlan> {
        let scaling = named_scaling("rope_scaling", cfg.rope_scaling.as_ref(), cfg.max_position_embeddings)?;
        let caches = vec![CacheKind::Full; cfg.num_hidden_layers as usize];
        Ok(ModelPlan::text("qwen2", "qwen2", cfg, caches, cfg.vocab_size, cfg.hidden_size)?
            .with_eos(eos_ids(config))
            .with_context(context_length(cfg.max_position_embeddings, &scaling))
            .with_dtype(&field_or::<String>(config, "torch_dtype", "bfloat16".into())?)
            .with_head_dims(&[cfg.head_dim()?]))
    }

    /// Drops what mlx-lm's `sanitize` drops: precomputed rotary
    /// frequencies, and a head the config ties to the embedding.
    fn rewrite(&self, cfg: &Config, _plan: &ModelPlan, name: &str, t: Array) -> Result<Vec<(String, Array)>> {
        let name = plugin_api::gguf::hf_name(name, &[]);
        let name = name.as_str();
        if name.contains("self_attn.rotary_emb.inv_freq") || (cfg.tie_word_embeddings && name.starts_with("lm_head.")) {
            return Ok(vec![]);
        }
        Ok(vec![(name.to_string(), t)])
    }

    /// One matmul for q/k/v (their biases stacked alike) and one for
    /// gate/up per layer.
    fn fusions(&self, _cfg: &Config, plan: &ModelPlan) -> Vec<Fusion> {
        decoder_fusions(plan)
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
        let (h, eps) = (cfg.hidden_size, cfg.rms_norm_eps);
        let head_dim = cfg.head_dim()?;
        let rope = rope(
            head_dim,
            cfg.rope_theta,
            cfg.rope_traditional,
            cfg.rope_scaling.as_ref(),
            cfg.max_position_embeddings,
        )?;
        // q/k/v carry biases, the output projection none.
        let attention =
            AttentionShape::new(h, cfg.num_attention_heads, cfg.num_key_value_heads, head_dim).biases(true, false);
        let spec =
            DecoderSpec::new(cfg.vocab_size, h, cfg.num_hidden_layers, cfg.tie_word_embeddings, NormKind::Rms, eps);
        let layout = BlockLayout::pre_norm(NormKind::Rms, eps);
        let lm = DecoderLm::build(w, &spec, |_, p| {
            let mlp = GatedMlp::load_with(w, &format!("{p}.mlp"), h, cfg.intermediate_size, GluActivation::Silu)?;
            DecoderBlock::load(w, p, &layout, &attention, rope.clone(), Box::new(mlp))
        })?;
        Ok(Box::new(lm))
    }
}
