//! The internlm3 family (Shanghai AI Lab's InternLM 3): Llama's pre-norm
//! decoder with biases on all four attention projections where `qkv_bias`
//! says (the output one included) and on the MLP where `bias` says, heads
//! of `hidden_size / num_attention_heads` features, and a rope scaled
//! `linear`ly or by dynamic NTK (the base grown for sequences past
//! `max_position_embeddings`, call by call).

use mlx::nn::{GatedMlp, GluActivation, NormKind, RopeScaling, Weights};
use mlx::Result;
use plugin_api::config::{
    config_error, context_length, eos_ids, field_or, implied_head_dim, named_scaling, nullable, one_of,
    positive_finite, rope, DecoderFields,
};
use plugin_api::layers::{
    decoder_fusions, AttentionShape, BlockLayout, DecoderBlock, DecoderLm, DecoderSpec, LmDrafter,
};
use plugin_api::{CacheKind, DraftRole, Fusion, ModelInfo, ModelPlan};
use plugin_api::{Drafter, Family, FamilyConfig, Model};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The config (config.json's fields; defaults as mlx-lm's).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Config {
    pub hidden_size: i32,
    pub num_hidden_layers: i32,
    pub intermediate_size: i32,
    pub num_attention_heads: i32,
    /// Default (absent or `null`): `num_attention_heads`.
    #[serde(default, deserialize_with = "nullable")]
    pub num_key_value_heads: Option<i32>,
    /// Must be `hidden_size / num_attention_heads` when given (the width
    /// the model runs at).
    #[serde(default, deserialize_with = "nullable")]
    pub head_dim: Option<i32>,
    pub rms_norm_eps: f32,
    pub vocab_size: i32,
    /// Biases on the MLP's projections. Default: false.
    #[serde(default, deserialize_with = "nullable")]
    pub bias: bool,
    /// Biases on the q, k, v and output projections. Default: false.
    #[serde(default, deserialize_with = "nullable")]
    pub qkv_bias: bool,
    /// Default (absent or `null`): 10000.
    #[serde(default = "default_rope_theta", deserialize_with = "rope_theta_or_default")]
    pub rope_theta: f32,
    #[serde(default, deserialize_with = "nullable")]
    pub rope_traditional: bool,
    /// `linear` or `dynamic`, or none.
    pub rope_scaling: Option<Value>,
    /// Default (absent or `null`): 32768.
    #[serde(default = "default_context", deserialize_with = "context_or_default")]
    pub max_position_embeddings: i32,
    #[serde(default, deserialize_with = "nullable")]
    pub tie_word_embeddings: bool,
    pub hidden_act: Option<String>,
}

plugin_api::config_defaults! {
    // mlx-lm's rope base and context when a config has none (or `null`).
    default_rope_theta / rope_theta_or_default: f32 = 10000.0;
    default_context / context_or_default: i32 = 32768;
}

impl Config {
    /// Features per head.
    fn head_dim(&self) -> i32 {
        self.hidden_size / self.num_attention_heads
    }

    /// Key/value heads.
    fn kv_heads(&self) -> i32 {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    /// The rope scaling, which must be `linear` or `dynamic` (as mlx-lm
    /// checks) when there is one.
    fn scaling(&self) -> Result<RopeScaling> {
        let entry = self.rope_scaling.as_ref();
        let kind = entry.and_then(|s| s.get("rope_type").or_else(|| s.get("type"))).and_then(Value::as_str);
        one_of("rope_scaling.rope_type", kind, &["default", "linear", "dynamic"])?;
        named_scaling("rope_scaling", entry, self.max_position_embeddings)
    }
}

impl FamilyConfig for Config {
    /// Every field in range, naming the field otherwise.
    fn check(&self) -> Result<()> {
        one_of("hidden_act", self.hidden_act.as_deref(), &["silu", "swish"])?;
        let d = implied_head_dim(self.hidden_size, self.num_attention_heads)?;
        if let Some(given) = self.head_dim.filter(|&g| g != d) {
            return Err(config_error(format!(
                "config: field `head_dim` is {given}, but internlm3 runs heads of `hidden_size / num_attention_heads` ({d})"
            )));
        }
        DecoderFields {
            hidden: self.hidden_size,
            layers: self.num_hidden_layers,
            intermediate: self.intermediate_size,
            heads: self.num_attention_heads,
            kv_heads: self.kv_heads(),
            head_dim: d,
            vocab: self.vocab_size,
        }
        .check()?;
        positive_finite("rope_theta", self.rope_theta)?;
        positive_finite("rms_norm_eps", self.rms_norm_eps)?;
        self.scaling().map(|_| ())
    }
}

/// The family registration.
pub struct InternLm3Family;

impl Family for InternLm3Family {
    type Config = Config;

    fn name(&self) -> &'static str {
        "internlm3"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["internlm3"]
    }

    fn catalog(&self) -> Vec<ModelInfo> {
        vec![ModelInfo::text("internlm3").examples(&["internlm/internlm3-8b-instruct"])]
    }

    fn plan(&self, cfg: &Config, config: &Value) -> Result<ModelPlan> {
        let caches = vec![CacheKind::Full; cfg.num_hidden_layers as usize];
        Ok(ModelPlan::text("internlm3", "internlm3", cfg, caches, cfg.vocab_size, cfg.hidden_size)?
            .with_eos(eos_ids(config))
            .with_context(context_length(cfg.max_position_embeddings, &cfg.scaling()?))
            .with_dtype(&field_or::<String>(config, "torch_dtype", "bfloat16".into())?)
            .with_head_dims(&[cfg.head_dim()]))
    }

    /// Precomputed rope frequencies are dropped, as mlx-lm drops them.
    fn rewrite(
        &self,
        _cfg: &Config,
        _plan: &ModelPlan,
        name: &str,
        t: mlx::Array,
    ) -> Result<Vec<(String, mlx::Array)>> {
        if name.contains("rope.inv_freq") || name.contains("rotary_emb.inv_freq") {
            return Ok(vec![]);
        }
        Ok(vec![(name.to_string(), t)])
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
        let (h, eps, d) = (cfg.hidden_size, cfg.rms_norm_eps, cfg.head_dim());
        let mpe = cfg.max_position_embeddings;
        let rope = rope(d, cfg.rope_theta, cfg.rope_traditional, cfg.rope_scaling.as_ref(), mpe)?;
        let attention =
            AttentionShape::new(h, cfg.num_attention_heads, cfg.kv_heads(), d).biases(cfg.qkv_bias, cfg.qkv_bias);
        let layout = BlockLayout::pre_norm(NormKind::Rms, eps);
        let spec =
            DecoderSpec::new(cfg.vocab_size, h, cfg.num_hidden_layers, cfg.tie_word_embeddings, NormKind::Rms, eps);
        Ok(Box::new(DecoderLm::build(w, &spec, |_, p| {
            let mlp =
                GatedMlp::load_biased(w, &format!("{p}.mlp"), h, cfg.intermediate_size, GluActivation::Silu, cfg.bias)?;
            DecoderBlock::load(w, p, &layout, &attention, rope.clone(), Box::new(mlp))
        })?))
    }
}
