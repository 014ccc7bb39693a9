//! The olmo2 family (OLMo 2): Llama's attention and SwiGLU MLP with the
//! norms moved after each branch (`post_attention_layernorm`,
//! `post_feedforward_layernorm`; the block's input is not normed) and q/k
//! RMS norms over the whole projection rather than each head.
//!
//! Also reads GGUF files of llama.cpp's `olmo2` architecture (`gguf.rs`).

use mlx::nn::{GatedMlp, GluActivation::Silu, NormKind, Weights};
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
    pub rms_norm_eps: f32,
    pub vocab_size: i32,
    /// Default: `hidden_size / num_attention_heads`.
    pub head_dim: Option<i32>,
    pub max_position_embeddings: Option<i32>,
    /// Default: `num_attention_heads`.
    pub num_key_value_heads: Option<i32>,
    /// Biases on q/k/v and o. Default: false.
    #[serde(default, deserialize_with = "nullable")]
    pub attention_bias: bool,
    /// Biases on the MLP's projections. Default: false.
    #[serde(default, deserialize_with = "nullable")]
    pub mlp_bias: bool,
    /// Default (absent or `null`): 10000.
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
    // mlx-lm's olmo2 defaults.
    default_rope_theta / rope_theta_or_default: f32 = 10000.0;
    default_tied / tied_or_default: bool = true;
}

impl Config {
    /// Key/value heads.
    pub fn kv_heads(&self) -> i32 {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    /// Features per head (`head_dim`, or the width split over the heads).
    pub fn head_dim(&self) -> Result<i32> {
        match self.head_dim {
            Some(d) if d > 0 => Ok(d),
            _ => implied_head_dim(self.hidden_size, self.num_attention_heads),
        }
    }

    fn context(&self) -> i32 {
        self.max_position_embeddings.unwrap_or(0)
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
            kv_heads: self.kv_heads(),
            head_dim: self.head_dim()?,
            vocab: self.vocab_size,
        }
        .check()?;
        positive_finite("rope_theta", self.rope_theta)?;
        positive_finite("rms_norm_eps", self.rms_norm_eps)?;
        named_scaling("rope_scaling", self.rope_scaling.as_ref(), self.context())?;
        Ok(())
    }
}

/// OLMo's post-norm block: `h = x + post_attention_layernorm(attn(x));
/// out = h + post_feedforward_layernorm(mlp(h))`.
pub fn post_norm_layout(eps: f32) -> BlockLayout {
    BlockLayout {
        pre_attn: None,
        post_attn: Some("post_attention_layernorm"),
        pre_ffn: None,
        post_ffn: Some("post_feedforward_layernorm"),
        ..BlockLayout::pre_norm(NormKind::Rms, eps)
    }
}

/// The family registration.
pub struct Olmo2Family;

impl Family for Olmo2Family {
    type Config = Config;

    fn name(&self) -> &'static str {
        "olmo2"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["olmo2"]
    }

    fn catalog(&self) -> Vec<ModelInfo> {
        vec![ModelInfo::text("olmo2")
            .examples(&["allenai/OLMo-2-1124-7B-Instruct", "allenai/OLMo-2-0425-1B-Instruct"])
            .gguf("olmo2")]
    }

    /// config.json, or a GGUF file's metadata (architecture `olmo2`).
    fn config(&self, raw: &Value) -> Result<Config> {
        crate::gguf::olmo2_config(raw)
    }

    fn plan(&self, cfg: &Config, config: &Value) -> Result<ModelPlan> {
        let scaling = named_scaling("rope_scaling", cfg.rope_scaling.as_ref(), cfg.context())?;
        let caches = vec![CacheKind::Full; cfg.num_hidden_layers as usize];
        Ok(ModelPlan::text("olmo2", "olmo2", cfg, caches, cfg.vocab_size, cfg.hidden_size)?
            .with_eos(eos_ids(config))
            .with_context(context_length(cfg.context(), &scaling))
            .with_dtype(&field_or::<String>(config, "torch_dtype", "bfloat16".into())?)
            .with_head_dims(&[cfg.head_dim()?]))
    }

    /// Drops the precomputed rotary frequencies some checkpoints carry.
    fn rewrite(&self, _cfg: &Config, _plan: &ModelPlan, name: &str, t: Array) -> Result<Vec<(String, Array)>> {
        let name = plugin_api::gguf::hf_name(name, &[]);
        let name = name.as_str();
        if name.contains("self_attn.rotary_emb.inv_freq") {
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
        let (h, eps) = (cfg.hidden_size, cfg.rms_norm_eps);
        let head_dim = cfg.head_dim()?;
        let rope = rope(head_dim, cfg.rope_theta, cfg.rope_traditional, cfg.rope_scaling.as_ref(), cfg.context())?;
        let attention = AttentionShape::new(h, cfg.num_attention_heads, cfg.kv_heads(), head_dim)
            .biases(cfg.attention_bias, cfg.attention_bias)
            .qk_norms_whole(eps);
        let layout = post_norm_layout(eps);
        let spec =
            DecoderSpec::new(cfg.vocab_size, h, cfg.num_hidden_layers, cfg.tie_word_embeddings, NormKind::Rms, eps);
        Ok(Box::new(DecoderLm::build(w, &spec, |_, p| {
            let mlp = GatedMlp::load_biased(w, &format!("{p}.mlp"), h, cfg.intermediate_size, Silu, cfg.mlp_bias)?;
            DecoderBlock::load(w, p, &layout, &attention, rope.clone(), Box::new(mlp))
        })?))
    }
}
