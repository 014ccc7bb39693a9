//! The starcoder2 family (StarCoder2 3B/7B/15B): pre-norm blocks with
//! biased LayerNorms, biases on every attention projection, and a plain
//! (non-gated) GELU MLP `c_proj(gelu(c_fc(x)))` with biases; config,
//! weight-name rules and registration.
//!
//! Also reads GGUF files of llama.cpp's `starcoder2` architecture (`gguf.rs`).

mod gguf;

use mlx::nn::{Activation, NormKind, PlainMlp, Rope, RopeScaling, Weights};
use mlx::{Array, Result};
use plugin_api::config::DecoderFields;
use plugin_api::config::{config_error, context_length, eos_ids, field_or, implied_head_dim, one_of, positive_finite};
use plugin_api::layers::{qkv_fusion, AttentionShape, BlockLayout, DecoderBlock, DecoderLm, DecoderSpec, LmDrafter};
use plugin_api::{CacheKind, DraftRole, Drafter, Family, FamilyConfig, Fusion, Model, ModelInfo, ModelPlan};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The config (config.json's fields, with mlx-lm's defaults).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Config {
    pub hidden_size: i32,
    pub num_hidden_layers: i32,
    pub intermediate_size: i32,
    pub num_attention_heads: i32,
    pub num_key_value_heads: i32,
    #[serde(default = "default_eps", deserialize_with = "eps_or_default")]
    pub norm_epsilon: f32,
    #[serde(default = "default_vocab", deserialize_with = "vocab_or_default")]
    pub vocab_size: i32,
    #[serde(default = "default_theta", deserialize_with = "theta_or_default")]
    pub rope_theta: f32,
    #[serde(default = "default_tied", deserialize_with = "tied_or_default")]
    pub tie_word_embeddings: bool,
    #[serde(default)]
    pub max_position_embeddings: Option<i32>,
    /// mlx-lm runs the exact GELU whatever GELU this names; other
    /// activations are refused.
    #[serde(default)]
    pub hidden_act: Option<String>,
    /// mlx-lm's starcoder2 always has biases.
    #[serde(default)]
    pub use_bias: Option<bool>,
    /// mlx-lm's starcoder2 ropes without scaling.
    #[serde(default)]
    pub rope_scaling: Option<Value>,
}

plugin_api::config_defaults! {
    default_eps / eps_or_default: f32 = 1e-5;
    default_vocab / vocab_or_default: i32 = 49152;
    default_theta / theta_or_default: f32 = 100000.0;
    default_tied / tied_or_default: bool = true;
}

impl Config {
    fn head_dim(&self) -> Result<i32> {
        implied_head_dim(self.hidden_size, self.num_attention_heads)
    }
}

impl FamilyConfig for Config {
    fn check(&self) -> Result<()> {
        one_of("hidden_act", self.hidden_act.as_deref(), &["gelu", "gelu_pytorch_tanh", "gelu_new", "gelu_fast"])?;
        if self.use_bias == Some(false) {
            return Err(config_error(
                "config: field `use_bias` is false, which the starcoder2 family does not implement",
            ));
        }
        if self.rope_scaling.as_ref().is_some_and(|v| !v.is_null()) {
            return Err(config_error(
                "config: field `rope_scaling` is set, which the starcoder2 family does not implement",
            ));
        }
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
        positive_finite("norm_epsilon", self.norm_epsilon)
    }
}

/// The family registration.
pub struct Starcoder2Family;

impl Family for Starcoder2Family {
    type Config = Config;

    fn name(&self) -> &'static str {
        "starcoder2"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["starcoder2"]
    }

    /// config.json, or a GGUF file's metadata (architecture `starcoder2`).
    fn config(&self, raw: &Value) -> Result<Config> {
        gguf::config(raw)
    }

    /// A GGUF file's tensor names in Hugging Face's terms; others as they are.
    fn rewrite(&self, _cfg: &Config, _plan: &ModelPlan, name: &str, t: Array) -> Result<Vec<(String, Array)>> {
        Ok(vec![(plugin_api::gguf::hf_name(name, gguf::NAMES), t)])
    }

    fn catalog(&self) -> Vec<ModelInfo> {
        vec![ModelInfo::text("starcoder2")
            .examples(&["bigcode/starcoder2-3b", "bigcode/starcoder2-15b-instruct-v0.1"])
            .gguf("starcoder2")]
    }

    /// Every layer attends over its whole cache: the checkpoints' 4096-token
    /// `sliding_window` is not applied, as mlx-lm does not apply it.
    fn plan(&self, cfg: &Config, config: &Value) -> Result<ModelPlan> {
        let caches = vec![CacheKind::Full; cfg.num_hidden_layers as usize];
        Ok(ModelPlan::text("starcoder2", "starcoder2", cfg, caches, cfg.vocab_size, cfg.hidden_size)?
            .with_eos(eos_ids(config))
            .with_context(context_length(cfg.max_position_embeddings.unwrap_or(0), &RopeScaling::None))
            .with_dtype(&field_or::<String>(config, "torch_dtype", "bfloat16".into())?)
            .with_head_dims(&[cfg.head_dim()?]))
    }

    /// One matmul for q/k/v per layer.
    fn fusions(&self, _cfg: &Config, plan: &ModelPlan) -> Vec<Fusion> {
        (0..plan.caches.len()).map(|i| qkv_fusion(&format!("model.layers.{i}.self_attn"))).collect()
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
        let (h, eps, d) = (cfg.hidden_size, cfg.norm_epsilon, cfg.head_dim()?);
        let norm = NormKind::Layer { bias: true };
        let rope = Rope::new(d, cfg.rope_theta, false, &RopeScaling::None)?;
        let attention = AttentionShape::new(h, cfg.num_attention_heads, cfg.num_key_value_heads, d).biases(true, true);
        let layout = BlockLayout::pre_norm(norm, eps);
        let spec = DecoderSpec::new(cfg.vocab_size, h, cfg.num_hidden_layers, cfg.tie_word_embeddings, norm, eps);
        let lm = DecoderLm::build(w, &spec, |_, p| {
            let mlp = PlainMlp::load(
                w,
                &format!("{p}.mlp"),
                ("c_fc", "c_proj"),
                h,
                cfg.intermediate_size,
                Activation::Gelu,
                true,
            )?;
            DecoderBlock::load(w, p, &layout, &attention, rope.clone(), Box::new(mlp))
        })?;
        Ok(Box::new(lm))
    }
}

#[cfg(feature = "export")]
plugin_api::export_plugin!("famlx-plugin-starcoder2", [Starcoder2Family]);
