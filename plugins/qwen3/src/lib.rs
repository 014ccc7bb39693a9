//! The qwen3 family (dense Qwen3): Llama-style blocks with per-head q/k RMS
//! norms; config, weight-name rules and registration.
//!
//! Also reads GGUF files of llama.cpp's `qwen3` architecture (`gguf.rs`).

mod gguf;

use mlx::nn::Weights;
use mlx::{Array, Result};
use plugin_api::config::{
    context_length, eos_ids, field_or, named_scaling, one_of, positive_finite, rope, DecoderFields,
};
use plugin_api::layers::{decoder_fusions, AttentionShape, DecoderLm, DecoderShape, LmDrafter};
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
    pub head_dim: i32,
    pub rms_norm_eps: f32,
    pub vocab_size: i32,
    /// Default (absent or `null`): 1e6.
    #[serde(default = "default_rope_theta", deserialize_with = "rope_theta_or_default")]
    pub rope_theta: f32,
    pub rope_scaling: Option<Value>,
    pub tie_word_embeddings: bool,
    pub max_position_embeddings: Option<i32>,
    pub hidden_act: Option<String>,
}

plugin_api::config_defaults! {
    // Qwen3's rope base when a config has none (or `null`).
    default_rope_theta / rope_theta_or_default: f32 = 1_000_000.0;
}

impl FamilyConfig for Config {
    /// Every field in range, naming the field otherwise.
    fn check(&self) -> Result<()> {
        let cfg = self;
        one_of("hidden_act", cfg.hidden_act.as_deref(), &["silu", "swish"])?;
        DecoderFields {
            hidden: cfg.hidden_size,
            layers: cfg.num_hidden_layers,
            intermediate: cfg.intermediate_size,
            heads: cfg.num_attention_heads,
            kv_heads: cfg.num_key_value_heads,
            head_dim: cfg.head_dim,
            vocab: cfg.vocab_size,
        }
        .check()?;
        positive_finite("rope_theta", cfg.rope_theta)?;
        positive_finite("rms_norm_eps", cfg.rms_norm_eps)?;
        named_scaling("rope_scaling", cfg.rope_scaling.as_ref(), cfg.max_position_embeddings.unwrap_or(0))?;
        Ok(())
    }
}

/// The family registration.
pub struct Qwen3Family;

impl Family for Qwen3Family {
    type Config = Config;

    fn name(&self) -> &'static str {
        "qwen3"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["qwen3"]
    }

    fn catalog(&self) -> Vec<ModelInfo> {
        vec![ModelInfo::text("qwen3").examples(&["Qwen/Qwen3-0.6B", "mlx-community/Qwen3-4B-4bit"]).gguf("qwen3")]
    }

    /// config.json, or a GGUF file's metadata (architecture `qwen3`).
    fn config(&self, raw: &Value) -> Result<Config> {
        gguf::config(raw)
    }

    fn plan(&self, cfg: &Config, config: &Value) -> Result<ModelPlan> {
        let scaling =
            named_scaling("rope_scaling", cfg.rope_scaling.as_ref(), cfg.max_position_embeddings.unwrap_or(0))?;
        let caches = vec![CacheKind::Full; cfg.num_hidden_layers as usize];
        Ok(ModelPlan::text("qwen3", "qwen3", cfg, caches, cfg.vocab_size, cfg.hidden_size)?
            .with_eos(eos_ids(config))
            .with_context(context_length(cfg.max_position_embeddings.unwrap_or(0), &scaling))
            .with_dtype(&field_or::<String>(config, "torch_dtype", "bfloat16".into())?)
            .with_head_dims(&[cfg.head_dim]))
    }

    /// A GGUF file's names as Hugging Face's; precomputed rotary
    /// frequencies dropped.
    fn rewrite(&self, _cfg: &Config, _plan: &ModelPlan, name: &str, t: Array) -> Result<Vec<(String, Array)>> {
        let name = plugin_api::gguf::hf_name(name, &[]);
        if name.contains("self_attn.rotary_emb.inv_freq") {
            return Ok(vec![]);
        }
        Ok(vec![(name, t)])
    }

    /// One matmul for q/k/v and one for gate/up per layer.
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
        let rope = rope(
            cfg.head_dim,
            cfg.rope_theta,
            false,
            cfg.rope_scaling.as_ref(),
            cfg.max_position_embeddings.unwrap_or(0),
        )?;
        let attention =
            AttentionShape::new(cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim)
                .qk_norms(cfg.rms_norm_eps);
        let shape = DecoderShape {
            vocab: cfg.vocab_size,
            layers: cfg.num_hidden_layers,
            intermediate: cfg.intermediate_size,
            rms_norm_eps: cfg.rms_norm_eps,
            attention,
            tied: cfg.tie_word_embeddings,
        };
        Ok(Box::new(DecoderLm::load(w, &shape, &rope)?))
    }
}

#[cfg(feature = "export")]
plugin_api::export_plugin!("famlx-plugin-qwen3", [Qwen3Family]);
