//! The ministral3 family (Ministral 3's text model): Llama's decoder whose
//! queries are scaled by position after rope (Llama 4's long-context
//! attention scaling, see [`crate::query_scale`]), roped as
//! `rope_parameters` says (YaRN in the released checkpoints), with
//! sliding-window layers where `layer_types` has them. The same code serves
//! the text model of `mistral3` checkpoints that carry one
//! ([`crate::mistral3`]), under their `language_model.` prefix.

use crate::query_scale::{PositionScale, ScaledQueryLm};
use mlx::nn::{GatedMlp, GluActivation, NormKind, Weights};
use mlx::{Array, Result};
use plugin_api::config::{
    config_error, context_length, eos_ids, field, field_or, implied_head_dim, in_range, named_scaling, one_of,
    positive_finite, rope, DecoderFields,
};
use plugin_api::layers::{
    gate_up_fusion, qkv_fusion, AttentionShape, BlockLayout, DecoderBlock, DecoderLm, DecoderSpec, LmDrafter,
};
use plugin_api::{CacheKind, DraftRole, Fusion, ModelInfo, ModelPlan};
use plugin_api::{Drafter, Family, FamilyConfig, Model};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The config (config.json's fields; defaults as mlx-lm's).
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
    /// `rope_theta`, the rope's scaling (`rope_type` and its fields), and
    /// the query scaling's `llama_4_scaling_beta` and
    /// `original_max_position_embeddings` (all required).
    pub rope_parameters: Value,
    /// Default: true.
    #[serde(default = "default_tied", deserialize_with = "tied_or_default")]
    pub tie_word_embeddings: bool,
    /// Which layers slide.
    #[serde(flatten)]
    pub layers: SlidingLayers,
    pub hidden_act: Option<String>,
}

/// Which layers attend over a sliding window (mlx-lm's `layer_types` and
/// `sliding_window`, as its llama and ministral3 models read them).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SlidingLayers {
    /// Per layer, `full_attention` or `sliding_attention`. Default: all full.
    pub layer_types: Option<Vec<String>>,
    /// The sliding layers' window.
    pub sliding_window: Option<i32>,
}

impl SlidingLayers {
    /// Whether layer `i` attends over a sliding window.
    pub fn sliding(&self, i: i32) -> bool {
        self.layer_types.as_ref().and_then(|t| t.get(i as usize)).is_some_and(|t| t == "sliding_attention")
    }

    /// The cache of each of `layers` layers: rotating ones of
    /// `sliding_window` for the sliding layers.
    pub fn caches(&self, layers: i32) -> Vec<CacheKind> {
        let window = CacheKind::Sliding { window: self.sliding_window.unwrap_or(0).max(0) as u32 };
        (0..layers).map(|i| if self.sliding(i) { window.clone() } else { CacheKind::Full }).collect()
    }

    /// The layer types are known, one for each of `layers` layers, and one
    /// at least is full (mlx-lm takes its mask from the first); sliding
    /// ones have a window.
    pub fn check(&self, layers: i32) -> Result<()> {
        let Some(types) = &self.layer_types else { return Ok(()) };
        if types.len() != layers as usize {
            return Err(config_error(format!(
                "config: field `layer_types` has {} entries, `num_hidden_layers` is {layers}",
                types.len()
            )));
        }
        for t in types {
            one_of("layer_types", Some(t), &["full_attention", "sliding_attention"])?;
        }
        if !types.iter().any(|t| t == "full_attention") {
            return Err(config_error("config: field `layer_types` has no `full_attention` layer"));
        }
        if types.iter().any(|t| t == "sliding_attention") {
            in_range("sliding_window", self.sliding_window.unwrap_or(0), i32::MAX)?;
        }
        Ok(())
    }
}

plugin_api::config_defaults! {
    default_tied / tied_or_default: bool = true;
}

impl Config {
    fn kv_heads(&self) -> i32 {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    pub(crate) fn head_dim(&self) -> Result<i32> {
        match self.head_dim {
            Some(d) => Ok(d),
            None => implied_head_dim(self.hidden_size, self.num_attention_heads),
        }
    }

    /// One entry of `rope_parameters`, an error naming it.
    fn rope_param<T: DeserializeOwned>(&self, name: &str) -> Result<T> {
        field(&self.rope_parameters, name)
            .map_err(|e| config_error(e.msg.replace(&format!("`{name}`"), &format!("`rope_parameters.{name}`"))))
    }

    /// The query scaling `rope_parameters` describes.
    fn position_scale(&self) -> Result<PositionScale> {
        Ok(PositionScale {
            beta: self.rope_param("llama_4_scaling_beta")?,
            span: self.rope_param("original_max_position_embeddings")?,
        })
    }

    /// The context it runs to.
    pub fn context(&self) -> Result<u32> {
        let mpe = self.max_position_embeddings.unwrap_or(0);
        Ok(context_length(mpe, &named_scaling("rope_parameters", Some(&self.rope_parameters), mpe)?))
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
        positive_finite("rms_norm_eps", self.rms_norm_eps)?;
        positive_finite("rope_parameters.rope_theta", self.rope_param("rope_theta")?)?;
        let PositionScale { beta, span } = self.position_scale()?;
        if !beta.is_finite() {
            return Err(config_error(format!("config: field `rope_parameters.llama_4_scaling_beta` is {beta}")));
        }
        in_range("rope_parameters.original_max_position_embeddings", span, i32::MAX)?;
        self.context()?;
        self.layers.check(self.num_hidden_layers)
    }
}

/// The q/k/v and gate/up fusions of every layer under `{prefix}model.layers`.
pub fn fusions(prefix: &str, layers: i32) -> Vec<Fusion> {
    (0..layers)
        .flat_map(|i| {
            let p = format!("{prefix}model.layers.{i}");
            [qkv_fusion(&format!("{p}.self_attn")), gate_up_fusion(&format!("{p}.mlp"))]
        })
        .collect()
}

/// mlx-lm's sanitize of a checkpoint tensor: no precomputed rope
/// frequencies, no head when it is `tied`, no FP8 activation scales.
/// FP8 weights themselves (`weight_scale_inv`) are refused.
pub fn sanitize(tied: bool, name: &str, t: Array) -> Result<Vec<(String, Array)>> {
    if name.ends_with("weight_scale_inv") {
        return Err(config_error(format!(
            "{name}: FP8 weights (scaled by `weight_scale_inv`) are not supported: use a bf16 or MLX-quantized checkpoint"
        )));
    }
    let tied_head = tied && name.ends_with("lm_head.weight");
    if name.contains("self_attn.rotary_emb.inv_freq") || name.ends_with("activation_scale") || tied_head {
        return Ok(vec![]);
    }
    Ok(vec![(name.to_string(), t)])
}

/// Loads the decoder of `cfg` whose tensors sit under `prefix` (`""` or
/// `language_model.`).
pub fn load(cfg: &Config, w: &dyn Weights, prefix: &'static str) -> Result<ScaledQueryLm> {
    let (h, eps, mpe) = (cfg.hidden_size, cfg.rms_norm_eps, cfg.max_position_embeddings.unwrap_or(0));
    let head_dim = cfg.head_dim()?;
    let rope = rope(head_dim, cfg.rope_param("rope_theta")?, false, Some(&cfg.rope_parameters), mpe)?;
    let attention = AttentionShape::new(h, cfg.num_attention_heads, cfg.kv_heads(), head_dim);
    let layout = BlockLayout::pre_norm(NormKind::Rms, eps);
    let spec = DecoderSpec {
        prefix,
        ..DecoderSpec::new(cfg.vocab_size, h, cfg.num_hidden_layers, cfg.tie_word_embeddings, NormKind::Rms, eps)
    };
    let lm = DecoderLm::build(w, &spec, |_, p| {
        let mlp = GatedMlp::load_with(w, &format!("{p}.mlp"), h, cfg.intermediate_size, GluActivation::Silu)?;
        DecoderBlock::load(w, p, &layout, &attention, rope.clone(), Box::new(mlp))
    })?;
    Ok(ScaledQueryLm { lm, scale: cfg.position_scale()? })
}

/// The family registration.
pub struct Ministral3Family;

impl Family for Ministral3Family {
    type Config = Config;

    fn name(&self) -> &'static str {
        "ministral3"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["ministral3"]
    }

    fn catalog(&self) -> Vec<ModelInfo> {
        vec![ModelInfo::text("ministral3").sliding()]
    }

    /// Rotating caches of `sliding_window` for the sliding layers.
    fn plan(&self, cfg: &Config, config: &Value) -> Result<ModelPlan> {
        Ok(ModelPlan::text(
            "ministral3",
            "ministral3",
            cfg,
            cfg.layers.caches(cfg.num_hidden_layers),
            cfg.vocab_size,
            cfg.hidden_size,
        )?
        .with_eos(eos_ids(config))
        .with_context(cfg.context()?)
        .with_dtype(&field_or::<String>(config, "torch_dtype", "bfloat16".into())?)
        .with_head_dims(&[cfg.head_dim()?]))
    }

    fn rewrite(&self, cfg: &Config, _plan: &ModelPlan, name: &str, t: Array) -> Result<Vec<(String, Array)>> {
        sanitize(cfg.tie_word_embeddings, name, t)
    }

    /// One matmul for q/k/v and one for gate/up per layer.
    fn fusions(&self, cfg: &Config, _plan: &ModelPlan) -> Vec<Fusion> {
        fusions("", cfg.num_hidden_layers)
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
        Ok(Box::new(load(cfg, w, "")?))
    }
}
