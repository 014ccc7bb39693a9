//! The mixtral family (Mixtral 8x7B / 8x22B): Mistral's decoder whose MLP
//! is a sparse mixture of experts, routed by taking the top k router logits
//! and a softmax over just those. The experts are read stacked, as mlx-lm
//! stores them (`block_sparse_moe.switch_mlp.*`), or one per expert as
//! Hugging Face's checkpoints store them (`block_sparse_moe.experts.{e}.w1`,
//! `w3`, `w2`), stacked at load. GGUF files of Mixtral are llama.cpp's
//! `llama` architecture (with `llama.expert_count`): the llama family
//! serves them.

use mlx::nn::{GluActivation, NormKind, Rope, RopeScaling, Weights};
use mlx::quant::QuantSpec;
use mlx::{Array, Result};
use plugin_api::config::{
    context_length, eos_ids, field_or, implied_head_dim, in_range, limits, one_of, positive_finite, present,
    DecoderFields,
};
use plugin_api::layers::{
    qkv_fusion, AttentionShape, BlockLayout, DecoderBlock, DecoderLm, DecoderSpec, LmDrafter, MoeShape, Routing,
    SparseMoe,
};
use plugin_api::{CacheKind, DraftRole, Fusion, ModelInfo, ModelPlan};
use plugin_api::{Drafter, Family, FamilyConfig, Model};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashMap;

/// The config (config.json's fields; defaults as mlx-lm's, Mixtral 8x7B's).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Config {
    #[serde(default = "default_vocab", deserialize_with = "vocab_or_default")]
    pub vocab_size: i32,
    #[serde(default = "default_hidden", deserialize_with = "hidden_or_default")]
    pub hidden_size: i32,
    /// Width of each expert's MLP.
    #[serde(default = "default_intermediate", deserialize_with = "intermediate_or_default")]
    pub intermediate_size: i32,
    #[serde(default = "default_layers", deserialize_with = "layers_or_default")]
    pub num_hidden_layers: i32,
    #[serde(default = "default_heads", deserialize_with = "heads_or_default")]
    pub num_attention_heads: i32,
    /// Experts per token.
    #[serde(default = "default_top_k", deserialize_with = "top_k_or_default")]
    pub num_experts_per_tok: i32,
    /// Default: 8 when absent; `null`: `num_attention_heads`.
    #[serde(default = "default_kv_heads", deserialize_with = "present")]
    pub num_key_value_heads: Option<i32>,
    /// Routed experts.
    #[serde(default = "default_experts", deserialize_with = "experts_or_default")]
    pub num_local_experts: i32,
    #[serde(default = "default_eps", deserialize_with = "eps_or_default")]
    pub rms_norm_eps: f32,
    #[serde(default = "default_rope_theta", deserialize_with = "rope_theta_or_default")]
    pub rope_theta: f32,
    #[serde(default, deserialize_with = "plugin_api::config::nullable")]
    pub rope_traditional: bool,
    #[serde(default, deserialize_with = "plugin_api::config::nullable")]
    pub tie_word_embeddings: bool,
    pub max_position_embeddings: Option<i32>,
    pub hidden_act: Option<String>,
}

plugin_api::config_defaults! {
    default_vocab / vocab_or_default: i32 = 32000;
    default_hidden / hidden_or_default: i32 = 4096;
    default_intermediate / intermediate_or_default: i32 = 14336;
    default_layers / layers_or_default: i32 = 32;
    default_heads / heads_or_default: i32 = 32;
    default_top_k / top_k_or_default: i32 = 2;
    default_experts / experts_or_default: i32 = 8;
    default_eps / eps_or_default: f32 = 1e-5;
    default_rope_theta / rope_theta_or_default: f32 = 1e6;
}

fn default_kv_heads() -> Option<i32> {
    Some(8)
}

impl Config {
    fn kv_heads(&self) -> i32 {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
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
            // mlx-lm's mixtral reads no `head_dim`: the heads split the width.
            head_dim: implied_head_dim(self.hidden_size, self.num_attention_heads)?,
            vocab: self.vocab_size,
        }
        .check()?;
        in_range("num_local_experts", self.num_local_experts, limits::EXPERTS)?;
        in_range("num_experts_per_tok", self.num_experts_per_tok, self.num_local_experts)?;
        positive_finite("rope_theta", self.rope_theta)?;
        positive_finite("rms_norm_eps", self.rms_norm_eps)
    }
}

/// Weights whose experts are stored one per expert under Hugging Face's
/// names (`{prefix}.experts.{e}.{w1,w3,w2}.*`) offered stacked as mlx-lm's
/// `{prefix}.switch_mlp.{gate,up,down}_proj.*`.
struct StackedExperts<'a> {
    inner: &'a dyn Weights,
    stacked: HashMap<String, Array>,
    quant: HashMap<String, QuantSpec>,
}

impl<'a> StackedExperts<'a> {
    /// `None` when `w` has no per-expert tensors under `prefix`.
    fn new(w: &'a dyn Weights, prefix: &str, experts: i32) -> Result<Option<Self>> {
        if w.get(&format!("{prefix}.experts.0.w1.weight")).is_none() {
            return Ok(None);
        }
        let (mut stacked, mut quant) = (HashMap::new(), HashMap::new());
        for (hf, proj) in [("w1", "gate_proj"), ("w3", "up_proj"), ("w2", "down_proj")] {
            let to = format!("{prefix}.switch_mlp.{proj}");
            for part in ["weight", "scales", "biases"] {
                let name = |e: i32| format!("{prefix}.experts.{e}.{hf}.{part}");
                if w.get(&name(0)).is_none() {
                    continue;
                }
                let each = (0..experts)
                    .map(|e| {
                        w.get(&name(e)).ok_or_else(|| {
                            mlx::Error::new(mlx::ErrorKind::MissingWeight, format!("missing weight {}", name(e)))
                        })
                    })
                    .collect::<Result<Vec<_>>>()?;
                stacked.insert(format!("{to}.{part}"), mlx::stack(&each.iter().collect::<Vec<_>>(), 0)?);
            }
            if let Some(q) = w.quant(&format!("{prefix}.experts.0.{hf}")) {
                quant.insert(to, q);
            }
        }
        Ok(Some(StackedExperts { inner: w, stacked, quant }))
    }
}

impl Weights for StackedExperts<'_> {
    fn get(&self, name: &str) -> Option<Array> {
        self.stacked.get(name).cloned().or_else(|| self.inner.get(name))
    }
    fn quant(&self, prefix: &str) -> Option<QuantSpec> {
        self.quant.get(prefix).cloned().or_else(|| self.inner.quant(prefix))
    }
    fn parallel(&self) -> Option<mlx::nn::Parallel> {
        self.inner.parallel()
    }
    fn slice(&self, name: &str, axis: i32, start: i32, stop: i32) -> Result<Option<Array>> {
        match self.stacked.get(name) {
            Some(t) => t.slice_axis(axis, start, stop).map(Some),
            None => self.inner.slice(name, axis, start, stop),
        }
    }
}

/// The family registration.
pub struct MixtralFamily;

impl Family for MixtralFamily {
    type Config = Config;

    fn name(&self) -> &'static str {
        "mixtral"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["mixtral"]
    }

    fn catalog(&self) -> Vec<ModelInfo> {
        vec![ModelInfo::text("mixtral")
            .examples(&["mistralai/Mixtral-8x7B-Instruct-v0.1", "mlx-community/Mixtral-8x7B-Instruct-v0.1-4bit"])
            .moe()
            .gguf("llama")]
    }

    fn plan(&self, cfg: &Config, config: &Value) -> Result<ModelPlan> {
        let caches = vec![CacheKind::Full; cfg.num_hidden_layers as usize];
        // mlx-lm's mixtral ropes plainly, whatever `rope_scaling` says.
        let context = context_length(cfg.max_position_embeddings.unwrap_or(0), &RopeScaling::None);
        Ok(ModelPlan::text("mixtral", "mixtral", cfg, caches, cfg.vocab_size, cfg.hidden_size)?
            .with_eos(eos_ids(config))
            .with_context(context)
            .with_dtype(&field_or::<String>(config, "torch_dtype", "bfloat16".into())?)
            .with_head_dims(&[implied_head_dim(cfg.hidden_size, cfg.num_attention_heads)?]))
    }

    /// No head when it is tied (mlx-lm's sanitize).
    fn rewrite(&self, cfg: &Config, _plan: &ModelPlan, name: &str, t: Array) -> Result<Vec<(String, Array)>> {
        if name.contains("self_attn.rotary_emb.inv_freq") || (cfg.tie_word_embeddings && name == "lm_head.weight") {
            return Ok(vec![]);
        }
        Ok(vec![(name.to_string(), t)])
    }

    /// One matmul for q/k/v per layer (the experts are stacked already).
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
        let head_dim = implied_head_dim(h, cfg.num_attention_heads)?;
        let rope = Rope::new(head_dim, cfg.rope_theta, cfg.rope_traditional, &RopeScaling::None)?;
        let attention = AttentionShape::new(h, cfg.num_attention_heads, cfg.kv_heads(), head_dim);
        let layout = BlockLayout::pre_norm(NormKind::Rms, eps);
        let spec =
            DecoderSpec::new(cfg.vocab_size, h, cfg.num_hidden_layers, cfg.tie_word_embeddings, NormKind::Rms, eps);
        let moe = MoeShape {
            hidden: h,
            experts: cfg.num_local_experts,
            top_k: cfg.num_experts_per_tok,
            intermediate: cfg.intermediate_size,
            routing: Routing::TopKSoftmax,
            act: GluActivation::Silu,
            shared_intermediate: None,
            shared_gate: false,
        };
        Ok(Box::new(DecoderLm::build(w, &spec, |_, p| {
            let prefix = format!("{p}.block_sparse_moe");
            let stacked = StackedExperts::new(w, &prefix, cfg.num_local_experts)?;
            let experts: &dyn Weights = match &stacked {
                Some(s) => s,
                None => w,
            };
            let ffn = SparseMoe::load(experts, &prefix, &moe)?;
            DecoderBlock::load(w, p, &layout, &attention, rope.clone(), Box::new(ffn))
        })?))
    }
}
