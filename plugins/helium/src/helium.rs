//! The helium family (Kyutai's Helium): Llama's pre-norm decoder with
//! interleaved rope pairs, biases on q/k/v only (`attention_bias`; never on
//! the output projection) and on the MLP where `mlp_bias` says, heads of
//! `hidden_size / num_attention_heads` features.

use mlx::nn::{GatedMlp, GluActivation, NormKind, Rope, RopeScaling, Weights};
use mlx::Result;
use plugin_api::config::{
    config_error, context_length, eos_ids, field_or, implied_head_dim, nullable, one_of, positive_finite, DecoderFields,
};
use plugin_api::layers::{
    decoder_fusions, AttentionShape, BlockLayout, DecoderBlock, DecoderLm, DecoderSpec, LmDrafter,
};
use plugin_api::{CacheKind, DraftRole, Fusion, ModelInfo, ModelPlan};
use plugin_api::{Drafter, Family, FamilyConfig, Model};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The config (config.json's fields; those mlx-lm requires are required).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Config {
    pub hidden_size: i32,
    pub num_hidden_layers: i32,
    pub intermediate_size: i32,
    pub num_attention_heads: i32,
    pub num_key_value_heads: i32,
    /// Must be `hidden_size / num_attention_heads` when given (the width
    /// the model runs at).
    pub head_dim: Option<i32>,
    pub rms_norm_eps: f32,
    pub vocab_size: i32,
    /// Biases on the q, k and v projections.
    pub attention_bias: bool,
    /// Biases on the MLP's projections.
    pub mlp_bias: bool,
    pub rope_theta: f32,
    /// Not implemented (mlx-lm ropes without scaling): refused unless `null`.
    pub rope_scaling: Option<Value>,
    pub tie_word_embeddings: bool,
    #[serde(default, deserialize_with = "nullable")]
    pub max_position_embeddings: i32,
    pub hidden_act: Option<String>,
}

impl Config {
    /// Features per head.
    fn head_dim(&self) -> i32 {
        self.hidden_size / self.num_attention_heads
    }
}

impl FamilyConfig for Config {
    /// Every field in range, naming the field otherwise.
    fn check(&self) -> Result<()> {
        one_of("hidden_act", self.hidden_act.as_deref(), &["silu", "swish"])?;
        let d = implied_head_dim(self.hidden_size, self.num_attention_heads)?;
        if let Some(given) = self.head_dim.filter(|&g| g != d) {
            return Err(config_error(format!(
                "config: field `head_dim` is {given}, but helium runs heads of `hidden_size / num_attention_heads` ({d})"
            )));
        }
        DecoderFields {
            hidden: self.hidden_size,
            layers: self.num_hidden_layers,
            intermediate: self.intermediate_size,
            heads: self.num_attention_heads,
            kv_heads: self.num_key_value_heads,
            head_dim: d,
            vocab: self.vocab_size,
        }
        .check()?;
        if self.rope_scaling.as_ref().is_some_and(|s| !s.is_null()) {
            return Err(config_error("config: field `rope_scaling` is set, which this family does not implement"));
        }
        positive_finite("rope_theta", self.rope_theta)?;
        positive_finite("rms_norm_eps", self.rms_norm_eps)
    }
}

/// The family registration.
pub struct HeliumFamily;

impl Family for HeliumFamily {
    type Config = Config;

    fn name(&self) -> &'static str {
        "helium"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["helium"]
    }

    fn catalog(&self) -> Vec<ModelInfo> {
        vec![ModelInfo::text("helium").examples(&["kyutai/helium-1-2b"])]
    }

    fn plan(&self, cfg: &Config, config: &Value) -> Result<ModelPlan> {
        let caches = vec![CacheKind::Full; cfg.num_hidden_layers as usize];
        Ok(ModelPlan::text("helium", "helium", cfg, caches, cfg.vocab_size, cfg.hidden_size)?
            .with_eos(eos_ids(config))
            .with_context(context_length(cfg.max_position_embeddings, &RopeScaling::None))
            .with_dtype(&field_or::<String>(config, "torch_dtype", "bfloat16".into())?)
            .with_head_dims(&[cfg.head_dim()]))
    }

    /// A tied checkpoint's `lm_head` tensors are dropped: mlx-lm's model
    /// holds one but reads the embedding.
    fn rewrite(
        &self,
        cfg: &Config,
        _plan: &ModelPlan,
        name: &str,
        tensor: mlx::Array,
    ) -> Result<Vec<(String, mlx::Array)>> {
        if cfg.tie_word_embeddings && name.starts_with("lm_head.") {
            return Ok(vec![]);
        }
        Ok(vec![(name.to_string(), tensor)])
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
        let rope = Rope::new(d, cfg.rope_theta, true, &RopeScaling::None)?;
        let attention = AttentionShape::new(h, cfg.num_attention_heads, cfg.num_key_value_heads, d)
            .biases(cfg.attention_bias, false);
        let layout = BlockLayout::pre_norm(NormKind::Rms, eps);
        let spec =
            DecoderSpec::new(cfg.vocab_size, h, cfg.num_hidden_layers, cfg.tie_word_embeddings, NormKind::Rms, eps);
        Ok(Box::new(DecoderLm::build(w, &spec, |_, p| {
            let mlp = GatedMlp::load_biased(
                w,
                &format!("{p}.mlp"),
                h,
                cfg.intermediate_size,
                GluActivation::Silu,
                cfg.mlp_bias,
            )?;
            DecoderBlock::load(w, p, &layout, &attention, rope.clone(), Box::new(mlp))
        })?))
    }
}
