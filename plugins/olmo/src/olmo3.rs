//! The olmo3 family (OLMo 3): OLMo 2's post-norm block with whole-projection
//! q/k norms, its layers either sliding-window or full attention
//! (`layer_types`; by default every fourth layer is full). Sliding layers
//! rope without the config's scaling; full layers with it.
//!
//! Also reads GGUF files of OLMo 3, which llama.cpp writes as its `olmo2`
//! architecture with sliding-window keys (`gguf.rs`); the olmo2 family
//! claims that architecture, so such a file is served with `--family olmo3`.

use crate::olmo2::post_norm_layout;
use mlx::nn::{GatedMlp, GluActivation::Silu, NormKind, Weights};
use mlx::{Array, Result};
use plugin_api::config::{
    config_error, context_length, eos_ids, field_or, implied_head_dim, in_range, named_scaling, nullable, one_of,
    positive_finite, rope, DecoderFields,
};
use plugin_api::layers::{decoder_fusions, AttentionShape, DecoderBlock, DecoderLm, DecoderSpec, LmDrafter};
use plugin_api::{CacheKind, DraftRole, Fusion, ModelInfo, ModelPlan};
use plugin_api::{Drafter, Family, FamilyConfig, Model};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A layer attending over the last `sliding_window` positions.
const SLIDING: &str = "sliding_attention";
/// A layer attending over every position.
const FULL: &str = "full_attention";

/// The config (config.json's fields).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Config {
    pub hidden_size: i32,
    pub num_hidden_layers: i32,
    pub intermediate_size: i32,
    pub num_attention_heads: i32,
    pub rms_norm_eps: f32,
    pub vocab_size: i32,
    pub max_position_embeddings: i32,
    /// Positions a sliding layer attends over.
    pub sliding_window: i32,
    pub rope_theta: f32,
    /// Biases on q/k/v and o. Default: false.
    #[serde(default, deserialize_with = "nullable")]
    pub attention_bias: bool,
    /// `sliding_attention` or `full_attention` per layer. Default: every
    /// fourth layer full, the rest sliding.
    pub layer_types: Option<Vec<String>>,
    /// Default: `num_attention_heads`.
    pub num_key_value_heads: Option<i32>,
    /// Default: `hidden_size / num_attention_heads`.
    pub head_dim: Option<i32>,
    pub rope_scaling: Option<Value>,
    #[serde(default, deserialize_with = "nullable")]
    pub tie_word_embeddings: bool,
    pub hidden_act: Option<String>,
}

impl Config {
    fn kv_heads(&self) -> i32 {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    fn head_dim(&self) -> Result<i32> {
        match self.head_dim {
            Some(d) if d > 0 => Ok(d),
            _ => implied_head_dim(self.hidden_size, self.num_attention_heads),
        }
    }

    /// Whether layer `i` slides.
    fn sliding(&self, i: i32) -> bool {
        match &self.layer_types {
            Some(t) => t[i as usize] == SLIDING,
            None => (i + 1) % 4 != 0,
        }
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
        in_range("sliding_window", self.sliding_window, i32::MAX)?;
        if let Some(t) = &self.layer_types {
            if t.len() != self.num_hidden_layers as usize {
                return Err(config_error(format!(
                    "config: field `layer_types` has {} entries for {} layers",
                    t.len(),
                    self.num_hidden_layers
                )));
            }
            for (i, kind) in t.iter().enumerate() {
                one_of(&format!("layer_types[{i}]"), Some(kind), &[SLIDING, FULL])?;
            }
        }
        named_scaling("rope_scaling", self.rope_scaling.as_ref(), self.max_position_embeddings)?;
        Ok(())
    }
}

/// The family registration.
pub struct Olmo3Family;

impl Family for Olmo3Family {
    type Config = Config;

    fn name(&self) -> &'static str {
        "olmo3"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["olmo3"]
    }

    fn catalog(&self) -> Vec<ModelInfo> {
        vec![ModelInfo::text("olmo3")
            .examples(&["allenai/Olmo-3-7B-Instruct", "allenai/Olmo-3-32B-Think"])
            .sliding()
            .gguf("olmo2")]
    }

    /// config.json, or an OLMo 3 GGUF file's metadata (architecture `olmo2`).
    fn config(&self, raw: &Value) -> Result<Config> {
        crate::gguf::olmo3_config(raw)
    }

    /// Sliding layers get the host's rotating caches of `sliding_window` positions.
    fn plan(&self, cfg: &Config, config: &Value) -> Result<ModelPlan> {
        let scaling = named_scaling("rope_scaling", cfg.rope_scaling.as_ref(), cfg.max_position_embeddings)?;
        let window = CacheKind::Sliding { window: cfg.sliding_window as u32 };
        let caches =
            (0..cfg.num_hidden_layers).map(|i| if cfg.sliding(i) { window.clone() } else { CacheKind::Full }).collect();
        Ok(ModelPlan::text("olmo3", "olmo3", cfg, caches, cfg.vocab_size, cfg.hidden_size)?
            .with_eos(eos_ids(config))
            .with_context(context_length(cfg.max_position_embeddings, &scaling))
            .with_dtype(&field_or::<String>(config, "torch_dtype", "bfloat16".into())?)
            .with_head_dims(&[cfg.head_dim()?]))
    }

    /// Drops the precomputed rotary frequencies some checkpoints carry; a
    /// GGUF file's names in Hugging Face's terms.
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
        let mpe = cfg.max_position_embeddings;
        let sliding_rope = rope(head_dim, cfg.rope_theta, false, None, mpe)?;
        let full_rope = rope(head_dim, cfg.rope_theta, false, cfg.rope_scaling.as_ref(), mpe)?;
        let attention = AttentionShape::new(h, cfg.num_attention_heads, cfg.kv_heads(), head_dim)
            .biases(cfg.attention_bias, cfg.attention_bias)
            .qk_norms_whole(eps);
        let layout = post_norm_layout(eps);
        let spec =
            DecoderSpec::new(cfg.vocab_size, h, cfg.num_hidden_layers, cfg.tie_word_embeddings, NormKind::Rms, eps);
        Ok(Box::new(DecoderLm::build(w, &spec, |i, p| {
            let rope = if cfg.sliding(i) { &sliding_rope } else { &full_rope };
            let mlp = GatedMlp::load_biased(w, &format!("{p}.mlp"), h, cfg.intermediate_size, Silu, false)?;
            DecoderBlock::load(w, p, &layout, &attention, rope.clone(), Box::new(mlp))
        })?))
    }
}
