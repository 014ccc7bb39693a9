//! The glm4 family (GLM-4-0414, GLM-Z1): Llama-style blocks with "sandwich"
//! norms (the attention's and the MLP's outputs are normed again before
//! the residual add), biases on q/k/v, gate and up stored as one
//! `gate_up_proj`, and rope over part of each head with interleaved pairs.
//!
//! Also reads GGUF files of llama.cpp's `glm4` architecture (`gguf.rs`).

use mlx::nn::{GatedMlp, GluActivation, NormKind, Rope, RopeScaling, Weights};
use mlx::{Array, Result};
use plugin_api::config::{config_error, context_length, eos_ids, field_or, one_of, positive_finite, DecoderFields};
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
    pub num_key_value_heads: i32,
    pub head_dim: i32,
    pub vocab_size: i32,
    pub rms_norm_eps: f32,
    /// Biases on q/k/v (never on o).
    pub attention_bias: bool,
    /// Fraction of each head that rotates.
    pub partial_rotary_factor: f32,
    pub rope_theta: f32,
    /// Interleaved rope pairs. Default: true.
    #[serde(default = "default_traditional", deserialize_with = "traditional_or_default")]
    pub rope_traditional: bool,
    /// Default: 32768.
    #[serde(default = "default_context", deserialize_with = "context_or_default")]
    pub max_position_embeddings: i32,
    pub hidden_act: Option<String>,
}

plugin_api::config_defaults! {
    default_traditional / traditional_or_default: bool = true;
    default_context / context_or_default: i32 = 32768;
}

impl Config {
    /// Rotated features per head.
    fn rope_dims(&self) -> i32 {
        (self.head_dim as f32 * self.partial_rotary_factor) as i32
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
            head_dim: self.head_dim,
            vocab: self.vocab_size,
        }
        .check()?;
        positive_finite("rope_theta", self.rope_theta)?;
        positive_finite("rms_norm_eps", self.rms_norm_eps)?;
        let (p, dims) = (self.partial_rotary_factor, self.rope_dims());
        if !(p > 0.0 && p <= 1.0) || dims < 2 || dims % 2 != 0 {
            return Err(config_error(format!(
                "config: field `partial_rotary_factor` is {p}: it must be in (0, 1] and rotate an even number of features"
            )));
        }
        Ok(())
    }
}

/// The family registration.
pub struct Glm4Family;

impl Family for Glm4Family {
    type Config = Config;

    fn name(&self) -> &'static str {
        "glm4"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["glm4"]
    }

    fn catalog(&self) -> Vec<ModelInfo> {
        vec![ModelInfo::text("glm4").examples(&["THUDM/GLM-4-9B-0414", "THUDM/GLM-Z1-9B-0414"]).gguf("glm4")]
    }

    /// config.json, or a GGUF file's metadata (architecture `glm4`).
    fn config(&self, raw: &Value) -> Result<Config> {
        crate::gguf::glm4_config(raw)
    }

    /// A GGUF file's tensor names in Hugging Face's terms.
    fn rewrite(&self, _cfg: &Config, _plan: &ModelPlan, name: &str, t: Array) -> Result<Vec<(String, Array)>> {
        Ok(vec![(plugin_api::gguf::hf_name(name, crate::gguf::NAMES), t)])
    }

    fn plan(&self, cfg: &Config, config: &Value) -> Result<ModelPlan> {
        let caches = vec![CacheKind::Full; cfg.num_hidden_layers as usize];
        Ok(ModelPlan::text("glm4", "glm4", cfg, caches, cfg.vocab_size, cfg.hidden_size)?
            .with_eos(eos_ids(config))
            .with_context(context_length(cfg.max_position_embeddings, &RopeScaling::None))
            .with_dtype(&field_or::<String>(config, "torch_dtype", "bfloat16".into())?)
            .with_head_dims(&[cfg.head_dim]))
    }

    /// One matmul for q/k/v per layer (gate/up come stored as one).
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
        // mlx-lm reads no rope scaling here.
        let rope = Rope::new(cfg.rope_dims(), cfg.rope_theta, cfg.rope_traditional, &RopeScaling::None)?;
        let attention = AttentionShape::new(h, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim)
            .biases(cfg.attention_bias, false);
        let layout = BlockLayout {
            post_attn: Some("post_self_attn_layernorm"),
            post_ffn: Some("post_mlp_layernorm"),
            ..BlockLayout::pre_norm(NormKind::Rms, eps)
        };
        // The head is its own, whatever `tie_word_embeddings` says.
        let spec = DecoderSpec::new(cfg.vocab_size, h, cfg.num_hidden_layers, false, NormKind::Rms, eps);
        Ok(Box::new(DecoderLm::build(w, &spec, |_, p| {
            let mlp = GatedMlp::load_with(w, &format!("{p}.mlp"), h, cfg.intermediate_size, GluActivation::Silu)?;
            DecoderBlock::load(w, p, &layout, &attention, rope.clone(), Box::new(mlp))
        })?))
    }
}
