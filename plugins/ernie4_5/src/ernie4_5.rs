//! The ernie4_5 family (Baidu's dense ERNIE 4.5): Llama's pre-norm decoder
//! with interleaved rope pairs and no rope scaling, biases on every
//! projection where `use_bias` says, and a `head_dim` that may differ from
//! `hidden_size / heads`. Also reads GGUF files of llama.cpp's `ernie4_5`
//! architecture (`gguf.rs`).

use mlx::nn::{GatedMlp, GluActivation, NormKind, Rope, RopeScaling, Weights};
use mlx::Result;
use plugin_api::config::{
    config_error, context_length, eos_ids, field_or, implied_head_dim, nullable, one_of, positive_finite, DecoderFields,
};
use plugin_api::layers::{
    decoder_fusions, AttentionShape, BlockLayout, DecoderBlock, DecoderLm, DecoderSpec, FeedForward, LmDrafter,
};
use plugin_api::{CacheKind, DraftRole, Fusion, ModelInfo, ModelPlan};
use plugin_api::{Drafter, Family, FamilyConfig, Model};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The config (config.json's fields; those mlx-lm requires are required).
/// ernie4_5_moe's config is this one and its MoE fields.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Config {
    pub hidden_size: i32,
    pub intermediate_size: i32,
    pub num_hidden_layers: i32,
    pub num_attention_heads: i32,
    pub num_key_value_heads: i32,
    /// Default (absent or `null`): `hidden_size / num_attention_heads`.
    #[serde(default, deserialize_with = "nullable")]
    pub head_dim: Option<i32>,
    pub rms_norm_eps: f32,
    pub vocab_size: i32,
    pub rope_theta: f32,
    /// Not implemented (mlx-lm ropes without scaling): refused unless `null`.
    pub rope_scaling: Option<Value>,
    /// Biases on every projection of attention and the MLPs.
    pub use_bias: bool,
    pub tie_word_embeddings: bool,
    pub max_position_embeddings: i32,
    pub hidden_act: Option<String>,
}

impl Config {
    /// Features per head.
    pub fn head_dim(&self) -> i32 {
        self.head_dim.unwrap_or_else(|| self.hidden_size / self.num_attention_heads.max(1))
    }

    /// The attention of every block.
    pub fn attention(&self) -> AttentionShape {
        AttentionShape::new(self.hidden_size, self.num_attention_heads, self.num_key_value_heads, self.head_dim())
            .biases(self.use_bias, self.use_bias)
    }

    /// The rope of every block: interleaved pairs, base `rope_theta`.
    pub fn rope(&self) -> Result<Rope> {
        Rope::new(self.head_dim(), self.rope_theta, true, &RopeScaling::None)
    }

    /// The dense MLP under `prefix`, `intermediate` wide.
    pub fn mlp(&self, w: &dyn Weights, prefix: &str, intermediate: i32) -> Result<GatedMlp> {
        GatedMlp::load_biased(w, prefix, self.hidden_size, intermediate, GluActivation::Silu, self.use_bias)
    }

    /// The decoder of these blocks, the feed-forward part of layer `i` under
    /// `prefix` made by `ffn`.
    pub fn decoder(
        &self,
        w: &dyn Weights,
        ffn: impl Fn(i32, &str) -> Result<Box<dyn FeedForward>>,
    ) -> Result<DecoderLm> {
        let (rope, attention, eps) = (self.rope()?, self.attention(), self.rms_norm_eps);
        let layout = BlockLayout::pre_norm(NormKind::Rms, eps);
        let (v, h, n) = (self.vocab_size, self.hidden_size, self.num_hidden_layers);
        let spec = DecoderSpec::new(v, h, n, self.tie_word_embeddings, NormKind::Rms, eps);
        DecoderLm::build(w, &spec, |i, p| {
            DecoderBlock::load(w, p, &layout, &attention, rope.clone(), ffn(i, &format!("{p}.mlp"))?)
        })
    }

    /// The plan both families make: one full cache per layer.
    pub fn plan(&self, family: &str, cfg: &impl Serialize, config: &Value) -> Result<ModelPlan> {
        let caches = vec![CacheKind::Full; self.num_hidden_layers as usize];
        Ok(ModelPlan::text(family, family, cfg, caches, self.vocab_size, self.hidden_size)?
            .with_eos(eos_ids(config))
            .with_context(context_length(self.max_position_embeddings, &RopeScaling::None))
            .with_dtype(&field_or::<String>(config, "torch_dtype", "bfloat16".into())?)
            .with_head_dims(&[self.head_dim()]))
    }
}

impl FamilyConfig for Config {
    /// Every field in range, naming the field otherwise.
    fn check(&self) -> Result<()> {
        one_of("hidden_act", self.hidden_act.as_deref(), &["silu", "swish"])?;
        let head_dim = match self.head_dim {
            Some(d) => d,
            None => implied_head_dim(self.hidden_size, self.num_attention_heads)?,
        };
        DecoderFields {
            hidden: self.hidden_size,
            layers: self.num_hidden_layers,
            intermediate: self.intermediate_size,
            heads: self.num_attention_heads,
            kv_heads: self.num_key_value_heads,
            head_dim,
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
pub struct Ernie45Family;

impl Family for Ernie45Family {
    type Config = Config;

    fn name(&self) -> &'static str {
        "ernie4_5"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["ernie4_5"]
    }

    fn catalog(&self) -> Vec<ModelInfo> {
        vec![ModelInfo::text("ernie4_5").examples(&["baidu/ERNIE-4.5-0.3B-PT"]).gguf("ernie4_5")]
    }

    /// config.json, or a GGUF file's metadata (architecture `ernie4_5`).
    fn config(&self, raw: &Value) -> Result<Config> {
        crate::gguf::ernie4_5_config(raw)
    }

    fn plan(&self, cfg: &Config, config: &Value) -> Result<ModelPlan> {
        cfg.plan("ernie4_5", cfg, config)
    }

    /// llama.cpp's names as Hugging Face's.
    fn rewrite(
        &self,
        _cfg: &Config,
        _plan: &ModelPlan,
        name: &str,
        t: mlx::Array,
    ) -> Result<Vec<(String, mlx::Array)>> {
        Ok(vec![(plugin_api::gguf::hf_name(name, &[]), t)])
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
        Ok(Box::new(cfg.decoder(w, |_, p| Ok(Box::new(cfg.mlp(w, p, cfg.intermediate_size)?)))?))
    }
}
