//! The gemma2 family (Gemma 2): sandwich-normed blocks with `1 + weight`
//! RMS norms, GeGLU MLPs, `√hidden`-scaled embeddings, a head tied to the
//! embedding, scores scaled by `query_pre_attn_scalar^-½` and soft-capped
//! (`attn_logit_softcapping`), and logits soft-capped
//! (`final_logit_softcapping`).
//!
//! As mlx-lm's `gemma2`, every layer attends to the whole context: the
//! `sliding_window` field is not read.
//!
//! Also reads GGUF files of llama.cpp's `gemma2` architecture (`gemma2_gguf.rs`).

use crate::model::{sandwich, GemmaLm};
use mlx::nn::{GatedMlp, GluActivation, NormKind, RopeScaling, Weights};
use mlx::{Array, Result};
use plugin_api::config::{context_length, eos_ids, field_or, nullable, one_of, positive_finite, rope, DecoderFields};
use plugin_api::layers::{decoder_fusions, AttentionShape, DecoderBlock, DecoderLm, DecoderSpec, LmDrafter, LogitOps};
use plugin_api::{CacheKind, DraftRole, Fusion, ModelInfo, ModelPlan};
use plugin_api::{Drafter, Family, FamilyConfig, Model};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The tanh-approximated GELU names a Gemma config gives its MLP activation
/// (mlx-lm runs `gelu_approx` whatever the name).
pub const GELU_TANH: &[&str] = &["gelu_pytorch_tanh", "gelu_new", "gelu_fast"];

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
    /// Default (absent or `null`): 10000.
    #[serde(default = "default_rope_theta", deserialize_with = "rope_theta_or_default")]
    pub rope_theta: f32,
    #[serde(default, deserialize_with = "nullable")]
    pub rope_traditional: bool,
    /// Scores are capped at this (`tanh(s / c) · c`). Default (absent): 50;
    /// `null`: not capped.
    #[serde(default = "default_attn_softcap")]
    pub attn_logit_softcapping: Option<f32>,
    /// Logits are capped at this. Default (absent): 30; `null`: not capped.
    #[serde(default = "default_final_softcap")]
    pub final_logit_softcapping: Option<f32>,
    /// Scores are scaled by this to the power -½. Default (absent or `null`): 144.
    #[serde(default = "default_query_scalar", deserialize_with = "query_scalar_or_default")]
    pub query_pre_attn_scalar: f64,
    pub max_position_embeddings: Option<i32>,
    pub hidden_act: Option<String>,
    pub hidden_activation: Option<String>,
}

plugin_api::config_defaults! {
    // mlx-lm's gemma2 defaults for what a config leaves out.
    default_rope_theta / rope_theta_or_default: f32 = 10000.0;
    default_query_scalar / query_scalar_or_default: f64 = 144.0;
}

fn default_attn_softcap() -> Option<f32> {
    Some(50.0)
}

fn default_final_softcap() -> Option<f32> {
    Some(30.0)
}

impl FamilyConfig for Config {
    /// Every field in range, naming the field otherwise.
    fn check(&self) -> Result<()> {
        one_of("hidden_act", self.hidden_act.as_deref(), GELU_TANH)?;
        one_of("hidden_activation", self.hidden_activation.as_deref(), GELU_TANH)?;
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
        positive_finite("query_pre_attn_scalar", self.query_pre_attn_scalar as f32)?;
        if let Some(c) = self.attn_logit_softcapping {
            positive_finite("attn_logit_softcapping", c)?;
        }
        if let Some(c) = self.final_logit_softcapping {
            positive_finite("final_logit_softcapping", c)?;
        }
        Ok(())
    }
}

/// The family registration.
pub struct Gemma2Family;

impl Family for Gemma2Family {
    type Config = Config;

    fn name(&self) -> &'static str {
        "gemma2"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["gemma2"]
    }

    fn catalog(&self) -> Vec<ModelInfo> {
        vec![ModelInfo::text("gemma2").examples(&["google/gemma-2-2b-it", "google/gemma-2-9b-it"]).gguf("gemma2")]
    }

    /// config.json, or a GGUF file's metadata (architecture `gemma2`).
    fn config(&self, raw: &Value) -> Result<Config> {
        crate::gemma2_gguf::config(raw)
    }

    fn plan(&self, cfg: &Config, config: &Value) -> Result<ModelPlan> {
        let mpe = cfg.max_position_embeddings.unwrap_or(0);
        let caches = vec![CacheKind::Full; cfg.num_hidden_layers as usize];
        Ok(ModelPlan::text("gemma2", "gemma2", cfg, caches, cfg.vocab_size, cfg.hidden_size)?
            .with_eos(eos_ids(config))
            .with_context(context_length(mpe, &RopeScaling::None))
            .with_dtype(&field_or::<String>(config, "torch_dtype", "bfloat16".into())?)
            .with_head_dims(&[cfg.head_dim]))
    }

    /// A GGUF file's names as Hugging Face's (its norms without the folded `+1`).
    fn rewrite(&self, _cfg: &Config, _plan: &ModelPlan, name: &str, t: Array) -> Result<Vec<(String, Array)>> {
        Ok(vec![crate::gemma2_gguf::tensor(name, t)?])
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
        let (h, eps, d) = (cfg.hidden_size, cfg.rms_norm_eps, cfg.head_dim);
        let mpe = cfg.max_position_embeddings.unwrap_or(0);
        let rope = rope(d, cfg.rope_theta, cfg.rope_traditional, None, mpe)?;
        let scale = 1.0 / cfg.query_pre_attn_scalar.powf(0.5);
        let attention =
            AttentionShape::new(h, cfg.num_attention_heads, cfg.num_key_value_heads, d).scaled(scale as f32);
        let spec = DecoderSpec {
            // `h * hidden_size**0.5`: the scale in the activations' type.
            embed_scale: Some((h as f64).powf(0.5) as f32),
            logits: LogitOps { softcap: cfg.final_logit_softcapping, ..LogitOps::default() },
            ..DecoderSpec::new(cfg.vocab_size, h, cfg.num_hidden_layers, true, NormKind::RmsOffset, eps)
        };
        let layout = sandwich(eps);
        let lm = DecoderLm::build(w, &spec, |_, p| {
            let mlp = GatedMlp::load_with(w, &format!("{p}.mlp"), h, cfg.intermediate_size, GluActivation::GeluApprox)?;
            DecoderBlock::load(w, p, &layout, &attention, rope.clone(), Box::new(mlp))
        })?;
        Ok(Box::new(GemmaLm { lm, attn_softcap: cfg.attn_logit_softcapping, clip_f16: false }))
    }
}
