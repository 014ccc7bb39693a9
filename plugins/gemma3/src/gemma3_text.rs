//! The gemma3_text family (Gemma 3 1B, and the text model of the larger
//! Gemma 3 checkpoints, see [`crate::gemma3`]): Gemma 2's sandwich-normed
//! GeGLU blocks with per-head q/k norms (also `1 + weight`), scores scaled
//! by `query_pre_attn_scalar^-½`, no soft-capping, and local layers: all
//! but every `sliding_window_pattern`-th attend over the last
//! `sliding_window` tokens, with a rope of their own base
//! (`rope_local_base_freq`, unscaled); the global layers rope with
//! `rope_theta` and `rope_scaling`. The embeddings are scaled by `√hidden`
//! rounded to bfloat16, and the head is tied to the embedding unless the
//! checkpoint has `lm_head.weight`.
//!
//! As mlx-lm's `gemma3_text`, `layer_types`, `attn_logit_softcapping`,
//! `final_logit_softcapping` and `tie_word_embeddings` are not read.

use crate::gemma2::GELU_TANH;
use crate::model::{offset_qk_norms, sandwich, GemmaLm};
use mlx::nn::{GatedMlp, GluActivation, NormKind, Weights};
use mlx::{Array, Dtype, Result};
use plugin_api::config::{
    context_length, eos_ids, field_or, in_range, named_scaling, one_of, positive_finite, rope, DecoderFields,
};
use plugin_api::layers::{gate_up_fusion, qkv_fusion, AttentionShape, DecoderBlock, DecoderLm, DecoderSpec, LmDrafter};
use plugin_api::{CacheKind, DraftRole, Fusion, ModelInfo, ModelPlan};
use plugin_api::{Drafter, Family, FamilyConfig, Model};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The config (config.json's fields; a multimodal checkpoint's `text_config`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Config {
    #[serde(default = "default_hidden", deserialize_with = "hidden_or_default")]
    pub hidden_size: i32,
    #[serde(default = "default_layers", deserialize_with = "layers_or_default")]
    pub num_hidden_layers: i32,
    #[serde(default = "default_intermediate", deserialize_with = "intermediate_or_default")]
    pub intermediate_size: i32,
    #[serde(default = "default_heads", deserialize_with = "heads_or_default")]
    pub num_attention_heads: i32,
    #[serde(default = "default_head_dim", deserialize_with = "head_dim_or_default")]
    pub head_dim: i32,
    #[serde(default = "default_eps", deserialize_with = "eps_or_default")]
    pub rms_norm_eps: f32,
    #[serde(default = "default_vocab", deserialize_with = "vocab_or_default")]
    pub vocab_size: i32,
    #[serde(default = "default_kv_heads", deserialize_with = "kv_heads_or_default")]
    pub num_key_value_heads: i32,
    /// The global layers' rope base.
    #[serde(default = "default_rope_theta", deserialize_with = "rope_theta_or_default")]
    pub rope_theta: f32,
    /// The local (sliding) layers' rope base.
    #[serde(default = "default_local_base", deserialize_with = "local_base_or_default")]
    pub rope_local_base_freq: f32,
    /// Scores are scaled by this to the power -½.
    #[serde(default = "default_query_scalar", deserialize_with = "query_scalar_or_default")]
    pub query_pre_attn_scalar: f64,
    /// Tokens a local layer sees.
    #[serde(default = "default_window", deserialize_with = "window_or_default")]
    pub sliding_window: i32,
    /// Every this-many-th layer is global, the rest local.
    #[serde(default = "default_pattern", deserialize_with = "pattern_or_default")]
    pub sliding_window_pattern: i32,
    #[serde(default = "default_max_positions", deserialize_with = "max_positions_or_default")]
    pub max_position_embeddings: i32,
    /// The global layers' rope scaling.
    pub rope_scaling: Option<Value>,
    pub hidden_act: Option<String>,
    pub hidden_activation: Option<String>,
}

plugin_api::config_defaults! {
    // mlx-lm's gemma3_text defaults (Gemma 3 1B's shape) for what a config
    // leaves out (or writes `null`).
    default_hidden / hidden_or_default: i32 = 1152;
    default_layers / layers_or_default: i32 = 26;
    default_intermediate / intermediate_or_default: i32 = 6912;
    default_heads / heads_or_default: i32 = 4;
    default_head_dim / head_dim_or_default: i32 = 256;
    default_eps / eps_or_default: f32 = 1e-6;
    default_vocab / vocab_or_default: i32 = 262144;
    default_kv_heads / kv_heads_or_default: i32 = 1;
    default_rope_theta / rope_theta_or_default: f32 = 1_000_000.0;
    default_local_base / local_base_or_default: f32 = 10_000.0;
    default_query_scalar / query_scalar_or_default: f64 = 256.0;
    default_window / window_or_default: i32 = 512;
    default_pattern / pattern_or_default: i32 = 6;
    default_max_positions / max_positions_or_default: i32 = 32768;
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
        positive_finite("rope_local_base_freq", self.rope_local_base_freq)?;
        positive_finite("rms_norm_eps", self.rms_norm_eps)?;
        positive_finite("query_pre_attn_scalar", self.query_pre_attn_scalar as f32)?;
        in_range("sliding_window", self.sliding_window, i32::MAX)?;
        in_range("sliding_window_pattern", self.sliding_window_pattern, i32::MAX)?;
        named_scaling("rope_scaling", self.rope_scaling.as_ref(), self.max_position_embeddings)?;
        Ok(())
    }
}

impl Config {
    /// Whether layer `i` is local (sliding): all but every
    /// `sliding_window_pattern`-th.
    pub fn is_sliding(&self, i: i32) -> bool {
        (i + 1) % self.sliding_window_pattern != 0
    }

    /// One cache slot per layer: a window for the local ones.
    pub fn caches(&self) -> Vec<CacheKind> {
        (0..self.num_hidden_layers)
            .map(|i| match self.is_sliding(i) {
                true => CacheKind::Sliding { window: self.sliding_window as u32 },
                false => CacheKind::Full,
            })
            .collect()
    }

    /// The context the global layers' rope serves.
    pub fn context(&self) -> Result<u32> {
        let scaling = named_scaling("rope_scaling", self.rope_scaling.as_ref(), self.max_position_embeddings)?;
        Ok(context_length(self.max_position_embeddings, &scaling))
    }

    /// q/k/v and gate/up fusions of every layer under `prefix`.
    pub fn fusions(&self, prefix: &str) -> Vec<Fusion> {
        (0..self.num_hidden_layers)
            .flat_map(|i| {
                let p = format!("{prefix}model.layers.{i}");
                [qkv_fusion(&format!("{p}.self_attn")), gate_up_fusion(&format!("{p}.mlp"))]
            })
            .collect()
    }

    /// The model, its tensors under `prefix` (`""`, or `language_model.`).
    pub fn load(&self, w: &dyn Weights, prefix: &'static str) -> Result<GemmaLm> {
        let (h, eps, d) = (self.hidden_size, self.rms_norm_eps, self.head_dim);
        let global = rope(d, self.rope_theta, false, self.rope_scaling.as_ref(), self.max_position_embeddings)?;
        let local = rope(d, self.rope_local_base_freq, false, None, self.max_position_embeddings)?;
        let scale = self.query_pre_attn_scalar.powf(-0.5) as f32;
        let attention =
            AttentionShape::new(h, self.num_attention_heads, self.num_key_value_heads, d).qk_norms(eps).scaled(scale);
        // mlx-lm's `sanitize`: tied unless the checkpoint has its own head.
        let tied = w.get(&format!("{prefix}lm_head.weight")).is_none();
        let spec = DecoderSpec {
            prefix,
            embed_scale: Some(embed_scale(h)?),
            ..DecoderSpec::new(self.vocab_size, h, self.num_hidden_layers, tied, NormKind::RmsOffset, eps)
        };
        let layout = sandwich(eps);
        let lm = DecoderLm::build(w, &spec, |i, p| {
            let mlp =
                GatedMlp::load_with(w, &format!("{p}.mlp"), h, self.intermediate_size, GluActivation::GeluApprox)?;
            let rope = if self.is_sliding(i) { local.clone() } else { global.clone() };
            let mut block = DecoderBlock::load(w, p, &layout, &attention, rope, Box::new(mlp))?;
            offset_qk_norms(&mut block.attn)?;
            Ok(block)
        })?;
        Ok(GemmaLm { lm, attn_softcap: None, clip_f16: true })
    }
}

/// `√hidden` rounded to bfloat16, as mlx-lm scales Gemma 3's embeddings
/// (`mx.array(hidden_size**0.5, mx.bfloat16)`, then the activations' type).
fn embed_scale(hidden: i32) -> Result<f32> {
    Array::scalar_f((hidden as f64).powf(0.5), Dtype::BF16)?.astype(Dtype::F32)?.item_f32()
}

/// The family registration.
pub struct Gemma3TextFamily;

impl Family for Gemma3TextFamily {
    type Config = Config;

    fn name(&self) -> &'static str {
        "gemma3_text"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["gemma3_text"]
    }

    fn catalog(&self) -> Vec<ModelInfo> {
        vec![ModelInfo::text("gemma3_text")
            .examples(&["google/gemma-3-1b-it", "mlx-community/gemma-3-1b-it-4bit"])
            .sliding()]
    }

    fn plan(&self, cfg: &Config, config: &Value) -> Result<ModelPlan> {
        Ok(ModelPlan::text("gemma3_text", "gemma3_text", cfg, cfg.caches(), cfg.vocab_size, cfg.hidden_size)?
            .with_eos(eos_ids(config))
            .with_context(cfg.context()?)
            .with_dtype(&field_or::<String>(config, "torch_dtype", "bfloat16".into())?)
            .with_head_dims(&[cfg.head_dim]))
    }

    /// One matmul for q/k/v and one for gate/up per layer.
    fn fusions(&self, cfg: &Config, _plan: &ModelPlan) -> Vec<Fusion> {
        cfg.fusions("")
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
        Ok(Box::new(cfg.load(w, "")?))
    }
}
