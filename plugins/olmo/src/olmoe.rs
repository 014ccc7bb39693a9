//! The olmoe family (OLMoE): Llama's pre-norm block with q/k RMS norms over
//! the whole projection, and every MLP a sparse mixture of experts (softmax
//! over all experts, the top k kept, optionally renormalised). Experts are
//! read stacked (mlx-lm's layout) or one by one (Hugging Face's).
//!
//! Also reads GGUF files of llama.cpp's `olmoe` architecture (`gguf.rs`).

use mlx::nn::{GluActivation, NormKind, Weights};
use mlx::{Array, Result};
use plugin_api::config::{
    config_error, context_length, eos_ids, field_or, implied_head_dim, in_range, limits, named_scaling, nullable,
    one_of, positive_finite, rope, DecoderFields,
};
use plugin_api::layers::{
    qkv_fusion, AttentionShape, BlockLayout, DecoderBlock, DecoderLm, DecoderSpec, LmDrafter, MoeShape, PerExpert,
    Routing, SparseMoe,
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
    /// Width of each expert's MLP.
    pub intermediate_size: i32,
    pub num_attention_heads: i32,
    pub rms_norm_eps: f32,
    pub vocab_size: i32,
    pub num_experts: i32,
    pub num_experts_per_tok: i32,
    /// Renormalise the chosen experts' weights to sum to 1. Default: false.
    #[serde(default, deserialize_with = "nullable")]
    pub norm_topk_prob: bool,
    /// Default: `hidden_size / num_attention_heads`.
    pub head_dim: Option<i32>,
    pub max_position_embeddings: Option<i32>,
    /// Default: `num_attention_heads`.
    pub num_key_value_heads: Option<i32>,
    /// Biases on q/k/v and o. Default: false.
    #[serde(default, deserialize_with = "nullable")]
    pub attention_bias: bool,
    /// Biases on the experts' projections (not implemented: refused).
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
    /// Clamping of q/k/v (Hugging Face's OLMoE; `null` in released
    /// checkpoints). mlx-lm does not clamp, so a value is refused.
    pub clip_qkv: Option<f32>,
}

plugin_api::config_defaults! {
    // mlx-lm's olmoe defaults.
    default_rope_theta / rope_theta_or_default: f32 = 10000.0;
    default_tied / tied_or_default: bool = true;
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
        in_range("num_experts", self.num_experts, limits::EXPERTS)?;
        in_range("num_experts_per_tok", self.num_experts_per_tok, self.num_experts)?;
        if self.mlp_bias {
            return Err(config_error("config: field `mlp_bias` is true: experts with biases are not implemented"));
        }
        if let Some(c) = self.clip_qkv {
            return Err(config_error(format!("config: field `clip_qkv` is {c}: q/k/v clamping is not implemented")));
        }
        positive_finite("rope_theta", self.rope_theta)?;
        positive_finite("rms_norm_eps", self.rms_norm_eps)?;
        named_scaling("rope_scaling", self.rope_scaling.as_ref(), self.context())?;
        Ok(())
    }
}

/// The family registration.
pub struct OlmoeFamily;

impl Family for OlmoeFamily {
    type Config = Config;

    fn name(&self) -> &'static str {
        "olmoe"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["olmoe"]
    }

    fn catalog(&self) -> Vec<ModelInfo> {
        vec![ModelInfo::text("olmoe")
            .examples(&["allenai/OLMoE-1B-7B-0125-Instruct", "allenai/OLMoE-1B-7B-0924"])
            .moe()
            .gguf("olmoe")]
    }

    /// config.json, or a GGUF file's metadata (architecture `olmoe`).
    fn config(&self, raw: &Value) -> Result<Config> {
        crate::gguf::olmoe_config(raw)
    }

    /// A GGUF file's tensor names in Hugging Face's terms.
    fn rewrite(&self, _cfg: &Config, _plan: &ModelPlan, name: &str, t: Array) -> Result<Vec<(String, Array)>> {
        Ok(vec![(plugin_api::gguf::hf_name(name, &[]), t)])
    }

    fn plan(&self, cfg: &Config, config: &Value) -> Result<ModelPlan> {
        let scaling = named_scaling("rope_scaling", cfg.rope_scaling.as_ref(), cfg.context())?;
        let caches = vec![CacheKind::Full; cfg.num_hidden_layers as usize];
        Ok(ModelPlan::text("olmoe", "olmoe", cfg, caches, cfg.vocab_size, cfg.hidden_size)?
            .with_eos(eos_ids(config))
            .with_context(context_length(cfg.context(), &scaling))
            .with_dtype(&field_or::<String>(config, "torch_dtype", "bfloat16".into())?)
            .with_head_dims(&[cfg.head_dim()?]))
    }

    /// One matmul for q/k/v per layer.
    fn fusions(&self, cfg: &Config, _plan: &ModelPlan) -> Vec<Fusion> {
        (0..cfg.num_hidden_layers).map(|i| qkv_fusion(&format!("model.layers.{i}.self_attn"))).collect()
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
        let moe = MoeShape {
            hidden: h,
            experts: cfg.num_experts,
            top_k: cfg.num_experts_per_tok,
            intermediate: cfg.intermediate_size,
            routing: Routing::SoftmaxTopK { norm_topk: cfg.norm_topk_prob },
            act: GluActivation::Silu,
            shared_intermediate: None,
            shared_gate: false,
        };
        let layout = BlockLayout::pre_norm(NormKind::Rms, eps);
        let spec =
            DecoderSpec::new(cfg.vocab_size, h, cfg.num_hidden_layers, cfg.tie_word_embeddings, NormKind::Rms, eps);
        Ok(Box::new(DecoderLm::build(w, &spec, |_, p| {
            // Hugging Face's checkpoints keep each expert apart; mlx-lm's stacked.
            let mlp = format!("{p}.mlp");
            let stacked = PerExpert::stacked(w, &mlp, cfg.num_experts, &PerExpert::GATE_UP_DOWN)?;
            let experts = SparseMoe::load(&stacked, &mlp, &moe)?;
            DecoderBlock::load(w, p, &layout, &attention, rope.clone(), Box::new(experts))
        })?))
    }
}
