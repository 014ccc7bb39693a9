//! The llama family (Llama 2 / 3 / 3.1 / 3.2, Mistral, SmolLM2 and
//! friends): a config, the shared Llama-style decoder, weight-name rules
//! (GGUF included, see [`gguf`]) and one registration.

pub mod gguf;

use mlx::nn::Weights;
use mlx::{Array, Result};
use plugin_api::config::{
    context_length, eos_ids, field_or, implied_head_dim, named_scaling, one_of, parse, positive_finite, rope,
    DecoderFields,
};
use plugin_api::family::{DraftForward, FamilySpec, ModelForward};
use plugin_api::layers::{decoder_fusions, AttentionShape, DecoderLm, DecoderShape, LmDrafter};
use plugin_api::{CacheKind, Fusion, ModelPlan};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The config (config.json's fields, or a GGUF file's in their terms).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Config {
    pub hidden_size: i32,
    pub num_hidden_layers: i32,
    pub intermediate_size: i32,
    pub num_attention_heads: i32,
    /// Default: `num_attention_heads`.
    pub num_key_value_heads: Option<i32>,
    /// Default: `hidden_size / num_attention_heads`.
    pub head_dim: Option<i32>,
    pub rms_norm_eps: f32,
    pub vocab_size: i32,
    /// Default: 10000.
    pub rope_theta: Option<f32>,
    pub rope_traditional: Option<bool>,
    pub rope_scaling: Option<Value>,
    /// Default: true (GGUF: whether the file has no `output.weight`).
    pub tie_word_embeddings: Option<bool>,
    pub max_position_embeddings: Option<i32>,
    pub hidden_act: Option<String>,
    /// A GGUF checkpoint: q/k rows come permuted for llama.cpp's rope.
    #[serde(default)]
    pub gguf: bool,
}

impl Config {
    /// Parses config.json (or the GGUF metadata's equivalent) and checks it.
    pub fn parse(c: &Value) -> Result<Config> {
        let cfg: Config = parse(c)?;
        cfg.check()?;
        Ok(cfg)
    }

    fn kv_heads(&self) -> i32 {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    fn head_dim(&self) -> Result<i32> {
        match self.head_dim {
            Some(d) => Ok(d),
            None => implied_head_dim(self.hidden_size, self.num_attention_heads),
        }
    }

    /// Every field in range: a config that cannot describe a real model is
    /// refused naming the field, before anything is built.
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
        positive_finite("rope_theta", self.rope_theta.unwrap_or(10000.0))?;
        positive_finite("rms_norm_eps", self.rms_norm_eps)?;
        named_scaling("rope_scaling", self.rope_scaling.as_ref(), self.max_position_embeddings.unwrap_or(0))?;
        Ok(())
    }
}

/// The family registration.
pub struct LlamaFamily;

impl FamilySpec for LlamaFamily {
    fn name(&self) -> &'static str {
        "llama"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["llama", "mistral"]
    }

    fn plan(&self, config: &Value) -> Result<ModelPlan> {
        let cfg = if config.get("format").and_then(Value::as_str) == Some("gguf") {
            Config::parse(&gguf::config(config)?).map_err(gguf::rename_fields)?
        } else {
            Config::parse(config)?
        };
        let scaling =
            named_scaling("rope_scaling", cfg.rope_scaling.as_ref(), cfg.max_position_embeddings.unwrap_or(0))?;
        let model_type = field_or::<String>(config, "model_type", "llama".into())?;
        let caches = vec![CacheKind::Full; cfg.num_hidden_layers as usize];
        Ok(ModelPlan::text("llama", &model_type, &cfg, caches, cfg.vocab_size, cfg.hidden_size)?
            .with_eos(eos_ids(config))
            .with_context(context_length(cfg.max_position_embeddings.unwrap_or(0), &scaling))
            .with_dtype(&field_or::<String>(config, "torch_dtype", "bfloat16".into())?))
    }

    fn rewrite(&self, plan: &ModelPlan, name: &str, t: Array) -> Result<Vec<(String, Array)>> {
        if name.contains("self_attn.rotary_emb.inv_freq") {
            return Ok(vec![]);
        }
        let cfg: Config = plan.config_as()?;
        if !cfg.gguf {
            return Ok(vec![(name.to_string(), t)]);
        }
        let Some(hf) = gguf::tensor_name(name) else { return Ok(vec![]) };
        let t = if hf.contains("self_attn.q_proj.") {
            gguf::unpermute(&t, cfg.num_attention_heads)?
        } else if hf.contains("self_attn.k_proj.") {
            gguf::unpermute(&t, cfg.kv_heads())?
        } else {
            t
        };
        Ok(vec![(hf, t)])
    }

    /// One matmul for q/k/v and one for gate/up per layer.
    fn fusions(&self, plan: &ModelPlan) -> Vec<Fusion> {
        decoder_fusions(plan)
    }

    /// A separate checkpoint of this family drafts as a small LM (`--draft-model`).
    fn build_drafter(
        &self,
        plan: &ModelPlan,
        w: &dyn Weights,
        target_plan: &ModelPlan,
        _target: &dyn Weights,
    ) -> Result<Option<Box<dyn DraftForward>>> {
        LmDrafter::for_separate_checkpoint(plan, target_plan, || self.build(plan, w))
    }

    fn build(&self, plan: &ModelPlan, w: &dyn Weights) -> Result<Box<dyn ModelForward>> {
        let cfg: Config = plan.config_as()?;
        let head_dim = cfg.head_dim()?;
        let rope = rope(
            head_dim,
            cfg.rope_theta.unwrap_or(10000.0),
            cfg.rope_traditional.unwrap_or(false),
            cfg.rope_scaling.as_ref(),
            cfg.max_position_embeddings.unwrap_or(0),
        )?;
        // GGUF files omit `output.weight` when the head is tied.
        let tied = if cfg.gguf { w.get("lm_head.weight").is_none() } else { cfg.tie_word_embeddings.unwrap_or(true) };
        let shape = DecoderShape {
            vocab: cfg.vocab_size,
            layers: cfg.num_hidden_layers,
            intermediate: cfg.intermediate_size,
            rms_norm_eps: cfg.rms_norm_eps,
            attention: AttentionShape::new(cfg.hidden_size, cfg.num_attention_heads, cfg.kv_heads(), head_dim),
            tied,
        };
        Ok(Box::new(DecoderLm::load(w, &shape, &rope)?))
    }
}

#[cfg(feature = "export")]
plugin_api::export_plugin!("famlx-plugin-llama", [LlamaFamily]);
