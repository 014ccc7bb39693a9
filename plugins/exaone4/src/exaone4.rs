//! The exaone4 family (EXAONE 4.0): blocks with no norm before attention or
//! the MLP but one on each's output before the residual add ("post-norm"),
//! per-head q/k RMS norms, and a pattern of sliding-window layers, which
//! rope, and global layers, which do not (without a pattern every layer is
//! global and ropes).
//!
//! Also reads GGUF files of llama.cpp's `exaone4` architecture (`gguf.rs`).

use mlx::nn::{GatedMlp, GluActivation, NormKind, Rope, Weights};
use mlx::{Array, Result};
use plugin_api::config::{
    config_error, context_length, eos_ids, field_or, in_range, named_scaling, one_of, positive_finite, rope,
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
    pub num_key_value_heads: i32,
    pub head_dim: i32,
    pub rms_norm_eps: f32,
    pub vocab_size: i32,
    pub max_position_embeddings: i32,
    pub rope_theta: f32,
    pub rope_scaling: Option<Value>,
    pub tie_word_embeddings: bool,
    /// Width of the sliding layers' window (needed when the pattern has any).
    pub sliding_window: Option<i32>,
    /// Per layer, cycled: `L` a local (sliding, roped) layer, `G` a global
    /// one without rope. Absent: every layer global, with rope.
    pub sliding_window_pattern: Option<String>,
    pub hidden_act: Option<String>,
}

/// What kind of layer a pattern letter makes.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Layer {
    /// sliding window, rope
    Local,
    /// full attention, no rope
    Global,
    /// full attention, rope (no pattern)
    Plain,
}

impl Config {
    fn layer(&self, i: i32) -> Layer {
        match self.sliding_window_pattern.as_deref().filter(|p| !p.is_empty()) {
            None => Layer::Plain,
            Some(p) if p.as_bytes()[i as usize % p.len()] == b'L' => Layer::Local,
            Some(_) => Layer::Global,
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
            kv_heads: self.num_key_value_heads,
            head_dim: self.head_dim,
            vocab: self.vocab_size,
        }
        .check()?;
        positive_finite("rope_theta", self.rope_theta)?;
        positive_finite("rms_norm_eps", self.rms_norm_eps)?;
        named_scaling("rope_scaling", self.rope_scaling.as_ref(), self.max_position_embeddings)?;
        if let Some(p) = &self.sliding_window_pattern {
            if let Some(c) = p.chars().find(|c| !matches!(c, 'L' | 'G')) {
                return Err(config_error(format!(
                    "config: field `sliding_window_pattern` is {p:?}: {c:?} is neither `L` (local) nor `G` (global)"
                )));
            }
            if p.contains('L') {
                let window = self.sliding_window.ok_or_else(|| {
                    config_error(
                        "config: field `sliding_window` is missing, and `sliding_window_pattern` has local layers",
                    )
                })?;
                in_range("sliding_window", window, i32::MAX)?;
            }
        }
        Ok(())
    }
}

/// The family registration.
pub struct Exaone4Family;

impl Family for Exaone4Family {
    type Config = Config;

    fn name(&self) -> &'static str {
        "exaone4"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["exaone4"]
    }

    fn catalog(&self) -> Vec<ModelInfo> {
        vec![ModelInfo::text("exaone4")
            .examples(&["LGAI-EXAONE/EXAONE-4.0-1.2B", "LGAI-EXAONE/EXAONE-4.0-32B"])
            .sliding()
            .gguf("exaone4")]
    }

    /// config.json, or a GGUF file's metadata (architecture `exaone4`).
    fn config(&self, raw: &Value) -> Result<Config> {
        crate::gguf::exaone4_config(raw)
    }

    /// A GGUF file's tensor names in Hugging Face's terms.
    fn rewrite(&self, _cfg: &Config, _plan: &ModelPlan, name: &str, t: Array) -> Result<Vec<(String, Array)>> {
        Ok(vec![(plugin_api::gguf::hf_name(name, &[]), t)])
    }

    /// Rotating caches of `sliding_window` for the local layers.
    fn plan(&self, cfg: &Config, config: &Value) -> Result<ModelPlan> {
        let scaling = named_scaling("rope_scaling", cfg.rope_scaling.as_ref(), cfg.max_position_embeddings)?;
        let caches = (0..cfg.num_hidden_layers)
            .map(|i| match (cfg.layer(i), cfg.sliding_window) {
                (Layer::Local, Some(w)) => CacheKind::Sliding { window: w as u32 },
                _ => CacheKind::Full,
            })
            .collect();
        Ok(ModelPlan::text("exaone4", "exaone4", cfg, caches, cfg.vocab_size, cfg.hidden_size)?
            .with_eos(eos_ids(config))
            .with_context(context_length(cfg.max_position_embeddings, &scaling))
            .with_dtype(&field_or::<String>(config, "torch_dtype", "bfloat16".into())?)
            .with_head_dims(&[cfg.head_dim]))
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
        // A GGUF file's llama3 scaling is its `rope_freqs` tensor (see gguf.rs).
        let rope = match plugin_api::gguf::rope_from_freqs(w, cfg.head_dim, cfg.rope_theta, false)? {
            Some(r) => r,
            None => rope(cfg.head_dim, cfg.rope_theta, false, cfg.rope_scaling.as_ref(), cfg.max_position_embeddings)?,
        };
        let attention =
            AttentionShape::new(h, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim).qk_norms(eps);
        // Norms only on the branches' outputs: `h = x + norm(attn(x))`, `h + norm(mlp(h))`.
        let layout = BlockLayout {
            pre_attn: None,
            post_attn: Some("post_attention_layernorm"),
            pre_ffn: None,
            post_ffn: Some("post_feedforward_layernorm"),
            ..BlockLayout::pre_norm(NormKind::Rms, eps)
        };
        let spec =
            DecoderSpec::new(cfg.vocab_size, h, cfg.num_hidden_layers, cfg.tie_word_embeddings, NormKind::Rms, eps);
        Ok(Box::new(DecoderLm::build(w, &spec, |i, p| {
            let mlp = GatedMlp::load_with(w, &format!("{p}.mlp"), h, cfg.intermediate_size, GluActivation::Silu)?;
            let rope = if cfg.layer(i) == Layer::Global { Rope::none() } else { rope.clone() };
            DecoderBlock::load(w, p, &layout, &attention, rope, Box::new(mlp))
        })?))
    }
}
