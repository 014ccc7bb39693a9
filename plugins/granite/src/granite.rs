//! The granite family (IBM Granite 3 dense): Llama's pre-norm decoder with
//! four scalings: the embeddings times `embedding_multiplier`, each
//! branch's update times `residual_multiplier` before it is added, the
//! attention scores times `attention_multiplier` (instead of `1/√head_dim`),
//! and the logits divided by `logits_scaling`.
//!
//! Also reads GGUF files of llama.cpp's `granite` architecture (`gguf.rs`).

use mlx::nn::{GatedMlp, GluActivation::Silu, NormKind, Weights};
use mlx::{Array, Result};
use plugin_api::config::{
    context_length, eos_ids, field_or, implied_head_dim, named_scaling, one_of, positive_finite, rope, DecoderFields,
};
use plugin_api::layers::{
    decoder_fusions, AttentionShape, BlockLayout, DecoderBlock, DecoderLm, DecoderSpec, LmDrafter, LogitOps,
};
use plugin_api::{CacheKind, DraftRole, Fusion, ModelInfo, ModelPlan, QuantClass, QuantSpec};
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
    /// The logits are divided by this.
    pub logits_scaling: f32,
    /// The attention's score scale.
    pub attention_multiplier: f32,
    /// The embeddings are multiplied by this.
    pub embedding_multiplier: f32,
    /// Each branch's update is multiplied by this before the residual add.
    pub residual_multiplier: f32,
    pub max_position_embeddings: i32,
    pub num_key_value_heads: i32,
    /// Biases on q/k/v and o.
    pub attention_bias: bool,
    /// Biases on the MLP's projections.
    pub mlp_bias: bool,
    pub rope_theta: f32,
    pub rope_scaling: Option<Value>,
    /// Default (absent or `null`): true.
    #[serde(default = "default_tied", deserialize_with = "tied_or_default")]
    pub tie_word_embeddings: bool,
    pub hidden_act: Option<String>,
}

plugin_api::config_defaults! {
    // mlx-lm's granite default.
    default_tied / tied_or_default: bool = true;
}

impl Config {
    /// Features per head: Granite always splits the width over the heads.
    fn head_dim(&self) -> Result<i32> {
        implied_head_dim(self.hidden_size, self.num_attention_heads)
    }
}

/// The multipliers every Granite config carries, each a positive number.
pub fn check_multipliers(logits: f32, attention: f32, embedding: f32, residual: f32) -> Result<()> {
    positive_finite("logits_scaling", logits)?;
    positive_finite("attention_multiplier", attention)?;
    positive_finite("embedding_multiplier", embedding)?;
    positive_finite("residual_multiplier", residual)
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
            head_dim: self.head_dim()?,
            vocab: self.vocab_size,
        }
        .check()?;
        check_multipliers(
            self.logits_scaling,
            self.attention_multiplier,
            self.embedding_multiplier,
            self.residual_multiplier,
        )?;
        positive_finite("rope_theta", self.rope_theta)?;
        positive_finite("rms_norm_eps", self.rms_norm_eps)?;
        named_scaling("rope_scaling", self.rope_scaling.as_ref(), self.max_position_embeddings)?;
        Ok(())
    }
}

/// mlx-lm's Granite quantization: the projections into the residual
/// stream (`o_proj`, `down_proj`, the experts' too) and the output head at
/// 8 bits, group 64, whose small magnitudes low-bit formats lose; `also`
/// names more modules kept so (the MoE router).
pub fn quant_class(name: &str, also: &[&str]) -> QuantClass {
    let Some(module) = name.strip_suffix(".weight") else { return QuantClass::Skip };
    let eight = ["self_attn.o_proj", "mlp.down_proj"].iter().chain(also).any(|s| module.ends_with(s));
    if eight || module == "lm_head" {
        QuantClass::Pinned(QuantSpec { group_size: 64, bits: 8, mode: "affine".into() })
    } else if module.contains("norm") {
        QuantClass::Skip
    } else {
        QuantClass::Body
    }
}

/// The family registration.
pub struct GraniteFamily;

impl Family for GraniteFamily {
    type Config = Config;

    fn name(&self) -> &'static str {
        "granite"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["granite"]
    }

    fn catalog(&self) -> Vec<ModelInfo> {
        vec![ModelInfo::text("granite")
            .examples(&["ibm-granite/granite-3.3-8b-instruct", "ibm-granite/granite-3.1-2b-instruct"])
            .gguf("granite")]
    }

    /// config.json, or a GGUF file's metadata (architecture `granite`).
    fn config(&self, raw: &Value) -> Result<Config> {
        crate::gguf::granite_config(raw)
    }

    fn plan(&self, cfg: &Config, config: &Value) -> Result<ModelPlan> {
        let scaling = named_scaling("rope_scaling", cfg.rope_scaling.as_ref(), cfg.max_position_embeddings)?;
        let caches = vec![CacheKind::Full; cfg.num_hidden_layers as usize];
        Ok(ModelPlan::text("granite", "granite", cfg, caches, cfg.vocab_size, cfg.hidden_size)?
            .with_eos(eos_ids(config))
            .with_context(context_length(cfg.max_position_embeddings, &scaling))
            .with_dtype(&field_or::<String>(config, "torch_dtype", "bfloat16".into())?)
            .with_head_dims(&[cfg.head_dim()?]))
    }

    /// A tied checkpoint's stray `lm_head.weight` is dropped, as mlx-lm does;
    /// a GGUF file's tensors are put in Hugging Face's terms first.
    fn rewrite(&self, cfg: &Config, _plan: &ModelPlan, name: &str, t: Array) -> Result<Vec<(String, Array)>> {
        let (name, t) = crate::gguf::hf_tensor(name, t, cfg.num_attention_heads, cfg.num_key_value_heads, false)?;
        let name = name.as_str();
        if cfg.tie_word_embeddings && name == "lm_head.weight" {
            return Ok(vec![]);
        }
        Ok(vec![(name.to_string(), t)])
    }

    fn quant_class(&self, _cfg: &Config, _plan: &ModelPlan, name: &str) -> QuantClass {
        quant_class(name, &[])
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
        let mpe = cfg.max_position_embeddings;
        let rope = rope(head_dim, cfg.rope_theta, false, cfg.rope_scaling.as_ref(), mpe)?;
        let attention = AttentionShape::new(h, cfg.num_attention_heads, cfg.num_key_value_heads, head_dim)
            .biases(cfg.attention_bias, cfg.attention_bias)
            .scaled(cfg.attention_multiplier);
        let layout =
            BlockLayout { residual_scale: Some(cfg.residual_multiplier), ..BlockLayout::pre_norm(NormKind::Rms, eps) };
        let spec = DecoderSpec {
            embed_scale: Some(cfg.embedding_multiplier),
            logits: LogitOps { divide: Some(cfg.logits_scaling), ..LogitOps::default() },
            ..DecoderSpec::new(cfg.vocab_size, h, cfg.num_hidden_layers, cfg.tie_word_embeddings, NormKind::Rms, eps)
        };
        Ok(Box::new(DecoderLm::build(w, &spec, |_, p| {
            let mlp = GatedMlp::load_biased(w, &format!("{p}.mlp"), h, cfg.intermediate_size, Silu, cfg.mlp_bias)?;
            DecoderBlock::load(w, p, &layout, &attention, rope.clone(), Box::new(mlp))
        })?))
    }
}
