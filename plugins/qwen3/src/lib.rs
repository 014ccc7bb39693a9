//! The qwen3 family (dense Qwen3): Llama-style blocks with per-head q/k RMS
//! norms; config, weight-name rules and registration.

use mlx::nn::{Rope, RopeScaling, Weights};
use mlx::{Error, Result};
use plugin_api::config::{one_of, positive_finite, DecoderFields};
use plugin_api::family::{FamilySpec, ModelForward};
use plugin_api::layers::{eos_ids, field, field_or, rope_scaling, AttentionShape, DecoderLm, DecoderShape};
use plugin_api::{CacheKind, ModelPlan};
use serde_json::{json, Value};

/// The parsed config.
#[derive(Debug, Clone)]
pub struct Config {
    pub hidden_size: i32,
    pub num_hidden_layers: i32,
    pub intermediate_size: i32,
    pub num_attention_heads: i32,
    pub num_key_value_heads: i32,
    pub head_dim: i32,
    pub rms_norm_eps: f32,
    pub vocab_size: i32,
    pub rope_theta: f32,
    pub rope_scaling: RopeScaling,
    pub tie_word_embeddings: bool,
    pub max_position_embeddings: i32,
}

impl Config {
    /// From config.json (or the plan's copy of it).
    pub fn parse(c: &Value) -> Result<Config> {
        one_of("hidden_act", c.get("hidden_act").and_then(Value::as_str), &["silu", "swish"])?;
        let cfg = Config {
            hidden_size: field(c, "hidden_size")?,
            num_hidden_layers: field(c, "num_hidden_layers")?,
            intermediate_size: field(c, "intermediate_size")?,
            num_attention_heads: field(c, "num_attention_heads")?,
            num_key_value_heads: field(c, "num_key_value_heads")?,
            head_dim: field(c, "head_dim")?,
            rms_norm_eps: field(c, "rms_norm_eps")?,
            vocab_size: field(c, "vocab_size")?,
            rope_theta: field_or(c, "rope_theta", 1_000_000.0)?,
            rope_scaling: rope_scaling(c)?,
            tie_word_embeddings: field(c, "tie_word_embeddings")?,
            max_position_embeddings: field_or(c, "max_position_embeddings", 0)?,
        };
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
        Ok(cfg)
    }
}

/// The family registration.
pub struct Qwen3Family;

impl FamilySpec for Qwen3Family {
    fn name(&self) -> &'static str {
        "qwen3"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["qwen3"]
    }

    fn plan(&self, config: &Value) -> Result<ModelPlan> {
        let cfg = Config::parse(config)?;
        // Keep the original config: `build` re-parses it with the same rules.
        let mut stored = config.clone();
        if let Some(o) = stored.as_object_mut() {
            o.retain(|k, _| !k.starts_with("quantization"));
        }
        Ok(ModelPlan {
            family: "qwen3".into(),
            model_type: "qwen3".into(),
            config: json!(stored).to_string().into(),
            caches: (0..cfg.num_hidden_layers).map(|_| CacheKind::Full).collect(),
            eos_ids: eos_ids(config).into(),
            vocab_size: cfg.vocab_size as u32,
            hidden_size: cfg.hidden_size as u32,
            max_position_embeddings: plugin_api::config::context_length(cfg.max_position_embeddings, &cfg.rope_scaling),
            modalities: vec!["text".into()].into(),
            dtype: field_or::<String>(config, "torch_dtype", "bfloat16".into())?.into(),
            add_bos: abi_stable::std_types::ROption::RNone,
        })
    }

    /// One matmul for q/k/v and one for gate/up per layer.
    fn fusions(&self, plan: &ModelPlan) -> Vec<plugin_api::Fusion> {
        plugin_api::layers::decoder_fusions(plan)
    }

    /// A separate checkpoint of this family drafts as a small LM (`--draft-model`).
    fn build_drafter(
        &self,
        plan: &ModelPlan,
        w: &dyn Weights,
        target_plan: &ModelPlan,
        _target: &dyn Weights,
    ) -> Result<Option<Box<dyn plugin_api::family::DraftForward>>> {
        plugin_api::layers::LmDrafter::for_separate_checkpoint(plan, target_plan, || self.build(plan, w))
    }

    fn build(&self, plan: &ModelPlan, w: &dyn Weights) -> Result<Box<dyn ModelForward>> {
        let c: Value = serde_json::from_str(plan.config.as_str()).map_err(|e| Error(format!("plan config: {e}")))?;
        let cfg = Config::parse(&c)?;
        let rope = Rope::new(cfg.head_dim, cfg.rope_theta, false, &cfg.rope_scaling)?;
        let eps = cfg.rms_norm_eps;
        let shape = DecoderShape {
            vocab: cfg.vocab_size,
            layers: cfg.num_hidden_layers,
            intermediate: cfg.intermediate_size,
            rms_norm_eps: eps,
            attention: AttentionShape {
                hidden: cfg.hidden_size,
                n_heads: cfg.num_attention_heads,
                n_kv_heads: cfg.num_key_value_heads,
                head_dim: cfg.head_dim,
                qk_norm_eps: Some(eps),
            },
            tied: cfg.tie_word_embeddings,
        };
        Ok(Box::new(DecoderLm::load(w, &shape, &rope)?))
    }
}

#[cfg(feature = "export")]
plugin_api::export_plugin!("famlx-plugin-qwen3", [Qwen3Family]);
