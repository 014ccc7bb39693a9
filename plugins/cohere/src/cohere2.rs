//! The cohere2 family (Command R7B, Command A): Cohere's parallel blocks
//! (attention and the MLP both read one LayerNorm of the input and add to
//! it side by side) in a pattern of sliding-window layers, which rope with
//! interleaved pairs, and global layers, which have no rope at all; the
//! head is the tied embedding and the logits are scaled by `logit_scale`.
//! Also reads GGUF files of llama.cpp's `cohere2` architecture (`gguf.rs`).

use mlx::nn::{GatedMlp, GluActivation, NormKind, Rope, RopeScaling, Weights};
use mlx::{Array, Result};
use plugin_api::config::{
    config_error, context_length, eos_ids, field_or, in_range, limits, one_of, positive_finite, DecoderFields,
};
use plugin_api::layers::{
    decoder_fusions, AttentionShape, BlockLayout, DecoderBlock, DecoderLm, DecoderSpec, LmDrafter, LogitOps,
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
    /// Default: 128 (must make up `hidden_size` with the heads).
    #[serde(default = "default_head_dim", deserialize_with = "head_dim_or_default")]
    pub head_dim: i32,
    pub vocab_size: i32,
    /// Default: 50000.
    #[serde(default = "default_rope_theta", deserialize_with = "rope_theta_or_default")]
    pub rope_theta: f32,
    /// Default: 1e-5.
    #[serde(default = "default_eps", deserialize_with = "eps_or_default")]
    pub layer_norm_eps: f32,
    /// The logits are multiplied by this. Default: 0.0625.
    #[serde(default = "default_logit_scale", deserialize_with = "logit_scale_or_default")]
    pub logit_scale: f32,
    /// Biases on q/k/v and o. Default: false.
    #[serde(default, deserialize_with = "plugin_api::config::nullable")]
    pub attention_bias: bool,
    /// The LayerNorms have biases. Default: false.
    #[serde(default, deserialize_with = "plugin_api::config::nullable")]
    pub layer_norm_bias: bool,
    /// Width of the sliding layers' window. Default: 4096.
    #[serde(default = "default_window", deserialize_with = "window_or_default")]
    pub sliding_window: i32,
    /// Every this-many-th layer is global, the rest slide. Default: 4.
    #[serde(default = "default_pattern", deserialize_with = "pattern_or_default")]
    pub sliding_window_pattern: i32,
    pub max_position_embeddings: Option<i32>,
    pub hidden_act: Option<String>,
}

plugin_api::config_defaults! {
    default_head_dim / head_dim_or_default: i32 = 128;
    default_rope_theta / rope_theta_or_default: f32 = 50000.0;
    default_eps / eps_or_default: f32 = 1e-5;
    default_logit_scale / logit_scale_or_default: f32 = 0.0625;
    default_window / window_or_default: i32 = 4096;
    default_pattern / pattern_or_default: i32 = 4;
}

impl Config {
    /// Whether layer `i` slides (and ropes); the last of each pattern is global.
    fn sliding(&self, i: i32) -> bool {
        (i + 1) % self.sliding_window_pattern != 0
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
        if self.head_dim * self.num_attention_heads != self.hidden_size {
            return Err(config_error(format!(
                "config: field `head_dim` ({}) times `num_attention_heads` ({}) must be `hidden_size` ({})",
                self.head_dim, self.num_attention_heads, self.hidden_size
            )));
        }
        positive_finite("rope_theta", self.rope_theta)?;
        positive_finite("layer_norm_eps", self.layer_norm_eps)?;
        positive_finite("logit_scale", self.logit_scale)?;
        in_range("sliding_window", self.sliding_window, i32::MAX)?;
        in_range("sliding_window_pattern", self.sliding_window_pattern, limits::LAYERS)
    }
}

/// The family registration.
pub struct Cohere2Family;

impl Family for Cohere2Family {
    type Config = Config;

    fn name(&self) -> &'static str {
        "cohere2"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["cohere2"]
    }

    /// config.json, or a GGUF file's metadata (architecture `cohere2`).
    fn config(&self, raw: &Value) -> Result<Config> {
        crate::gguf::cohere2_config(raw)
    }

    /// A GGUF file's tensor names in Hugging Face's terms; others as they are.
    fn rewrite(&self, _cfg: &Config, _plan: &ModelPlan, name: &str, t: Array) -> Result<Vec<(String, Array)>> {
        Ok(vec![(plugin_api::gguf::hf_name(name, &[]), t)])
    }

    fn catalog(&self) -> Vec<ModelInfo> {
        vec![ModelInfo::text("cohere2")
            .examples(&["CohereLabs/c4ai-command-r7b-12-2024", "CohereLabs/c4ai-command-a-03-2025"])
            .sliding()
            .gguf("cohere2")]
    }

    /// Rotating caches of `sliding_window` for the sliding layers.
    fn plan(&self, cfg: &Config, config: &Value) -> Result<ModelPlan> {
        let window = CacheKind::Sliding { window: cfg.sliding_window as u32 };
        let caches = (0..cfg.num_hidden_layers).map(|i| if cfg.sliding(i) { window.clone() } else { CacheKind::Full });
        let context = context_length(cfg.max_position_embeddings.unwrap_or(0), &RopeScaling::None);
        Ok(ModelPlan::text("cohere2", "cohere2", cfg, caches.collect(), cfg.vocab_size, cfg.hidden_size)?
            .with_eos(eos_ids(config))
            .with_context(context)
            .with_dtype(&field_or::<String>(config, "torch_dtype", "bfloat16".into())?)
            .with_head_dims(&[cfg.head_dim]))
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
        let (h, eps) = (cfg.hidden_size, cfg.layer_norm_eps);
        let norm = NormKind::Layer { bias: cfg.layer_norm_bias };
        // Interleaved pairs, plain base: mlx-lm reads no rope scaling here.
        let rope = Rope::new(cfg.head_dim, cfg.rope_theta, true, &RopeScaling::None)?;
        let attention = AttentionShape::new(h, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim)
            .biases(cfg.attention_bias, cfg.attention_bias);
        let layout = BlockLayout { pre_ffn: None, parallel: true, ..BlockLayout::pre_norm(norm, eps) };
        // The head is always the embedding, whatever `tie_word_embeddings` says.
        let mut spec = DecoderSpec::new(cfg.vocab_size, h, cfg.num_hidden_layers, true, norm, eps);
        spec.logits = LogitOps { scale: Some(cfg.logit_scale), ..LogitOps::default() };
        Ok(Box::new(DecoderLm::build(w, &spec, |i, p| {
            let mlp = GatedMlp::load_with(w, &format!("{p}.mlp"), h, cfg.intermediate_size, GluActivation::Silu)?;
            let rope = if cfg.sliding(i) { rope.clone() } else { Rope::none() };
            DecoderBlock::load(w, p, &layout, &attention, rope, Box::new(mlp))
        })?))
    }
}
