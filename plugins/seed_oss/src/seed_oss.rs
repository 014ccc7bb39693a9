//! The seed_oss family (ByteDance Seed-OSS): Llama's pre-norm decoder with
//! its own switches for biases: on the q/k/v projections
//! (`attention_bias`), on the output projection (`attention_out_bias`) and
//! on the MLP (`mlp_bias`); a `head_dim` of its own, apart from
//! `hidden_size / heads`. Also reads GGUF files of llama.cpp's `seed_oss`
//! architecture (`gguf.rs`).

use mlx::nn::{GatedMlp, GluActivation, NormKind, Weights};
use mlx::Result;
use plugin_api::config::{
    context_length, eos_ids, field_or, named_scaling, nullable, one_of, positive_finite, rope, DecoderFields,
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
    pub num_key_value_heads: i32,
    pub head_dim: i32,
    pub rms_norm_eps: f32,
    pub vocab_size: i32,
    /// Biases on the q, k and v projections. Default: false.
    #[serde(default, deserialize_with = "nullable")]
    pub attention_bias: bool,
    /// A bias on the output projection. Default: false.
    #[serde(default, deserialize_with = "nullable")]
    pub attention_out_bias: bool,
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
    pub max_position_embeddings: Option<i32>,
    pub hidden_act: Option<String>,
}

plugin_api::config_defaults! {
    // mlx-lm's rope base and head tying when a config has none (or `null`).
    default_rope_theta / rope_theta_or_default: f32 = 10000.0;
    default_tied / tied_or_default: bool = true;
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
        named_scaling("rope_scaling", self.rope_scaling.as_ref(), self.max_position_embeddings.unwrap_or(0))?;
        Ok(())
    }
}

/// The family registration.
pub struct SeedOssFamily;

impl Family for SeedOssFamily {
    type Config = Config;

    fn name(&self) -> &'static str {
        "seed_oss"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["seed_oss"]
    }

    fn catalog(&self) -> Vec<ModelInfo> {
        vec![ModelInfo::text("seed_oss").examples(&["ByteDance-Seed/Seed-OSS-36B-Instruct"]).gguf("seed_oss")]
    }

    /// config.json, or a GGUF file's metadata (architecture `seed_oss`).
    fn config(&self, raw: &Value) -> Result<Config> {
        crate::gguf::seed_oss_config(raw)
    }

    fn plan(&self, cfg: &Config, config: &Value) -> Result<ModelPlan> {
        let mpe = cfg.max_position_embeddings.unwrap_or(0);
        let scaling = named_scaling("rope_scaling", cfg.rope_scaling.as_ref(), mpe)?;
        let caches = vec![CacheKind::Full; cfg.num_hidden_layers as usize];
        Ok(ModelPlan::text("seed_oss", "seed_oss", cfg, caches, cfg.vocab_size, cfg.hidden_size)?
            .with_eos(eos_ids(config))
            .with_context(context_length(mpe, &scaling))
            .with_dtype(&field_or::<String>(config, "torch_dtype", "bfloat16".into())?)
            .with_head_dims(&[cfg.head_dim]))
    }

    /// llama.cpp's names as Hugging Face's; a tied checkpoint's `lm_head`
    /// tensors are dropped, as mlx-lm drops them.
    fn rewrite(
        &self,
        cfg: &Config,
        _plan: &ModelPlan,
        name: &str,
        tensor: mlx::Array,
    ) -> Result<Vec<(String, mlx::Array)>> {
        let name = plugin_api::gguf::hf_name(name, &[]);
        if cfg.tie_word_embeddings && name.starts_with("lm_head.") {
            return Ok(vec![]);
        }
        Ok(vec![(name, tensor)])
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
        let mpe = cfg.max_position_embeddings.unwrap_or(0);
        let rope = rope(cfg.head_dim, cfg.rope_theta, cfg.rope_traditional, cfg.rope_scaling.as_ref(), mpe)?;
        let attention = AttentionShape::new(h, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim)
            .biases(cfg.attention_bias, cfg.attention_out_bias);
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
