//! The phi family (Phi-1, Phi-1.5, Phi-2): GPT-style parallel blocks —
//! attention and a GELU MLP both read one LayerNorm of the input and add to
//! it side by side — with biases on every projection, partially rotated
//! heads, a final LayerNorm and an output head with a bias. Also reads
//! GGUF files of llama.cpp's `phi2` architecture (`gguf.rs`).

use mlx::nn::{Activation, NormKind, PlainMlp, Rope, RopeScaling, Weights};
use mlx::{Array, Result};
use plugin_api::config::DecoderFields;
use plugin_api::config::{config_error, context_length, eos_ids, field_or, implied_head_dim, one_of, positive_finite};
use plugin_api::layers::{qkv_fusion, AttentionShape, BlockLayout, DecoderBlock, DecoderLm, DecoderSpec, LmDrafter};
use plugin_api::{CacheKind, DraftRole, Drafter, Family, FamilyConfig, Fusion, Model, ModelInfo, ModelPlan};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The config (config.json's fields, with mlx-lm's defaults).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Config {
    #[serde(default = "default_max_positions", deserialize_with = "max_positions_or_default")]
    pub max_position_embeddings: i32,
    #[serde(default = "default_vocab", deserialize_with = "vocab_or_default")]
    pub vocab_size: i32,
    #[serde(default = "default_hidden", deserialize_with = "hidden_or_default")]
    pub hidden_size: i32,
    #[serde(default = "default_heads", deserialize_with = "heads_or_default")]
    pub num_attention_heads: i32,
    #[serde(default = "default_layers", deserialize_with = "layers_or_default")]
    pub num_hidden_layers: i32,
    /// Absent or `null`: as many as the query heads.
    #[serde(default)]
    pub num_key_value_heads: Option<i32>,
    /// The share of each head's features that rotate.
    #[serde(default = "default_partial", deserialize_with = "partial_or_default")]
    pub partial_rotary_factor: f64,
    #[serde(default = "default_intermediate", deserialize_with = "intermediate_or_default")]
    pub intermediate_size: i32,
    #[serde(default = "default_eps", deserialize_with = "eps_or_default")]
    pub layer_norm_eps: f32,
    #[serde(default = "default_theta", deserialize_with = "theta_or_default")]
    pub rope_theta: f32,
    /// mlx-lm runs the tanh GELU whatever this says; other activations are refused.
    #[serde(default)]
    pub hidden_act: Option<String>,
    /// Per-head q/k LayerNorms (Hugging Face's option): mlx-lm's phi has none.
    #[serde(default)]
    pub qk_layernorm: Option<bool>,
    /// mlx-lm's phi ropes without scaling.
    #[serde(default)]
    pub rope_scaling: Option<Value>,
}

plugin_api::config_defaults! {
    default_max_positions / max_positions_or_default: i32 = 2048;
    default_vocab / vocab_or_default: i32 = 51200;
    default_hidden / hidden_or_default: i32 = 2560;
    default_heads / heads_or_default: i32 = 32;
    default_layers / layers_or_default: i32 = 32;
    default_partial / partial_or_default: f64 = 0.4;
    default_intermediate / intermediate_or_default: i32 = 10240;
    default_eps / eps_or_default: f32 = 1e-5;
    default_theta / theta_or_default: f32 = 10000.0;
}

impl Config {
    fn kv_heads(&self) -> i32 {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    fn head_dim(&self) -> Result<i32> {
        implied_head_dim(self.hidden_size, self.num_attention_heads)
    }

    /// mlx-lm's `int(partial_rotary_factor · head_dim)`.
    fn rotary_dims(&self) -> Result<i32> {
        Ok((self.partial_rotary_factor * self.head_dim()? as f64) as i32)
    }
}

/// `partial_rotary_factor` must lie in (0, 1].
pub(crate) fn check_partial(p: f64) -> Result<()> {
    if !(p > 0.0 && p <= 1.0) {
        return Err(config_error(format!("config: field `partial_rotary_factor` is {p}, must be in (0, 1]")));
    }
    Ok(())
}

/// The activation names that mean the tanh GELU (what mlx-lm's phi runs).
const GELU_TANH: &[&str] = &["gelu_new", "gelu_pytorch_tanh", "gelu_fast"];

impl FamilyConfig for Config {
    fn check(&self) -> Result<()> {
        one_of("hidden_act", self.hidden_act.as_deref(), GELU_TANH)?;
        if self.qk_layernorm == Some(true) {
            return Err(config_error("config: field `qk_layernorm` is true, which the phi family does not implement"));
        }
        if self.rope_scaling.as_ref().is_some_and(|v| !v.is_null()) {
            return Err(config_error("config: field `rope_scaling` is set, which the phi family does not implement"));
        }
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
        check_partial(self.partial_rotary_factor)?;
        positive_finite("rope_theta", self.rope_theta)?;
        positive_finite("layer_norm_eps", self.layer_norm_eps)
    }
}

/// The family registration.
pub struct PhiFamily;

impl Family for PhiFamily {
    type Config = Config;

    fn name(&self) -> &'static str {
        "phi"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["phi", "phi2"]
    }

    /// config.json, or a GGUF file's metadata (architecture `phi2`).
    fn config(&self, raw: &Value) -> Result<Config> {
        crate::gguf::config(raw)
    }

    /// A GGUF file's tensor names in Hugging Face's terms; others as they are.
    fn rewrite(&self, _cfg: &Config, _plan: &ModelPlan, name: &str, t: Array) -> Result<Vec<(String, Array)>> {
        Ok(vec![(crate::gguf::hf_name(name), t)])
    }

    fn catalog(&self) -> Vec<ModelInfo> {
        vec![ModelInfo::text("phi")
            .examples(&["microsoft/phi-2", "microsoft/phi-1_5", "mlx-community/phi-2"])
            .gguf("phi2")]
    }

    fn plan(&self, cfg: &Config, config: &Value) -> Result<ModelPlan> {
        let caches = vec![CacheKind::Full; cfg.num_hidden_layers as usize];
        Ok(ModelPlan::text("phi", "phi", cfg, caches, cfg.vocab_size, cfg.hidden_size)?
            .with_eos(eos_ids(config))
            .with_context(context_length(cfg.max_position_embeddings, &RopeScaling::None))
            .with_dtype(&field_or::<String>(config, "torch_dtype", "float16".into())?)
            .with_head_dims(&[cfg.head_dim()?]))
    }

    /// One matmul for q/k/v per layer.
    fn fusions(&self, _cfg: &Config, plan: &ModelPlan) -> Vec<Fusion> {
        (0..plan.caches.len()).map(|i| qkv_fusion(&format!("model.layers.{i}.self_attn"))).collect()
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
        let norm = NormKind::Layer { bias: true };
        let rope = Rope::new(cfg.rotary_dims()?, cfg.rope_theta, false, &RopeScaling::None)?;
        let attention = AttentionShape::new(h, cfg.num_attention_heads, cfg.kv_heads(), cfg.head_dim()?)
            .biases(true, true)
            .out_named("dense");
        // x + attn(n) + mlp(n), n = input_layernorm(x).
        let layout = BlockLayout { parallel: true, pre_ffn: None, ..BlockLayout::pre_norm(norm, eps) };
        let spec = DecoderSpec {
            final_norm: "final_layernorm",
            head_bias: true,
            ..DecoderSpec::new(cfg.vocab_size, h, cfg.num_hidden_layers, false, norm, eps)
        };
        let lm = DecoderLm::build(w, &spec, |_, p| {
            let mlp = PlainMlp::load(
                w,
                &format!("{p}.mlp"),
                ("fc1", "fc2"),
                h,
                cfg.intermediate_size,
                Activation::GeluApprox,
                true,
            )?;
            DecoderBlock::load(w, p, &layout, &attention, rope.clone(), Box::new(mlp))
        })?;
        Ok(Box::new(lm))
    }
}
