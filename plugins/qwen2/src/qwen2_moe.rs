//! The qwen2_moe family (Qwen1.5-MoE, Qwen2-MoE): Qwen2's attention (q/k/v
//! biases) with a sparse mixture of experts in place of the MLP: softmax
//! routing over every expert, the top k mixed, plus a shared expert gated by
//! a sigmoid. Config, weight-name rules and registration.
//!
//! Also reads GGUF files of llama.cpp's `qwen2moe` architecture (`gguf.rs`).

use mlx::nn::{GatedMlp, GluActivation, NormKind, Weights};
use mlx::{Array, Dtype, Result};
use plugin_api::config::{
    config_error, context_length, eos_ids, field_or, implied_head_dim, in_range, limits, nullable, one_of,
    positive_finite, rope, DecoderFields,
};
use plugin_api::layers::{
    gate_up_fusion, qkv_fusion, AttentionShape, BlockLayout, DecoderBlock, DecoderLm, DecoderSpec, FeedForward,
    LmDrafter, MoeShape, PerExpert, Routing, SparseMoe,
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
    /// Width of the dense MLP of the layers `mlp_only_layers` and
    /// `decoder_sparse_step` leave dense.
    pub intermediate_size: i32,
    pub num_attention_heads: i32,
    pub num_experts_per_tok: i32,
    pub num_experts: i32,
    pub moe_intermediate_size: i32,
    pub shared_expert_intermediate_size: i32,
    pub rms_norm_eps: f32,
    pub vocab_size: i32,
    /// Default: `num_attention_heads`.
    pub num_key_value_heads: Option<i32>,
    /// Default (absent or `null`): 1e6.
    #[serde(default = "default_rope_theta", deserialize_with = "rope_theta_or_default")]
    pub rope_theta: f32,
    #[serde(default, deserialize_with = "nullable")]
    pub rope_traditional: bool,
    /// Must be absent or `null`: mlx-lm's qwen2_moe applies no scaling.
    pub rope_scaling: Option<Value>,
    pub max_position_embeddings: Option<i32>,
    /// Renormalise the chosen experts' weights to sum to 1. Default: false.
    #[serde(default, deserialize_with = "nullable")]
    pub norm_topk_prob: bool,
    /// Every this-many-th layer is sparse. Default: 1 (all).
    #[serde(default = "default_sparse_step", deserialize_with = "sparse_step_or_default")]
    pub decoder_sparse_step: i32,
    /// Layers with a dense MLP instead. Default: none.
    #[serde(default, deserialize_with = "nullable")]
    pub mlp_only_layers: Vec<i32>,
    pub hidden_act: Option<String>,
}

plugin_api::config_defaults! {
    // Qwen2-MoE's rope base when a config has none (or `null`).
    default_rope_theta / rope_theta_or_default: f32 = 1_000_000.0;
    // Every layer sparse when a config does not say.
    default_sparse_step / sparse_step_or_default: i32 = 1;
}

impl Config {
    fn kv_heads(&self) -> i32 {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    /// Features per head: the width split evenly over the query heads.
    fn head_dim(&self) -> Result<i32> {
        implied_head_dim(self.hidden_size, self.num_attention_heads)
    }

    /// Whether layer `i` routes over experts (else it has a dense MLP).
    fn sparse(&self, i: i32) -> bool {
        !self.mlp_only_layers.contains(&i) && (i + 1) % self.decoder_sparse_step == 0
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
        let k = self.num_experts_per_tok;
        if !(1..=self.num_experts).contains(&k) {
            return Err(config_error(format!(
                "config: field `num_experts_per_tok` is {k}, must be in 1..={} (`num_experts`)",
                self.num_experts
            )));
        }
        in_range("moe_intermediate_size", self.moe_intermediate_size, limits::INTERMEDIATE)?;
        in_range("shared_expert_intermediate_size", self.shared_expert_intermediate_size, limits::INTERMEDIATE)?;
        in_range("decoder_sparse_step", self.decoder_sparse_step, limits::LAYERS)?;
        positive_finite("rope_theta", self.rope_theta)?;
        positive_finite("rms_norm_eps", self.rms_norm_eps)?;
        if let Some(s) = self.rope_scaling.as_ref().filter(|s| !s.is_null()) {
            return Err(config_error(format!(
                "config: field `rope_scaling` is {s}, which this family does not implement (mlx-lm's qwen2_moe applies none)"
            )));
        }
        Ok(())
    }
}

/// Qwen2-MoE's sparse block: routed experts chosen as mlx-lm chooses them
/// (the top k of the softmax, by partition of its negation), plus the
/// sigmoid-gated shared expert.
#[derive(Debug)]
struct SharedExpertMoe {
    moe: SparseMoe,
    norm_topk: bool,
}

impl FeedForward for SharedExpertMoe {
    fn forward(&self, x: &Array) -> Result<Array> {
        let m = &self.moe;
        let gates = m.router.forward(x)?.softmax(&[-1], true)?;
        let k = m.top_k;
        let inds = gates.neg()?.argpartition(k - 1, -1)?.slice_axis(-1, 0, k)?;
        let mut scores = gates.take_along_axis(&inds, -1)?;
        if self.norm_topk {
            scores = scores.div(&scores.sum(&[-1], true)?)?;
        }
        let y = m.mix(x, &inds.astype(Dtype::U32)?, &scores)?;
        let (Some(shared), Some(gate)) = (&m.shared, &m.shared_gate) else {
            return Ok(y);
        };
        y.add(&gate.forward(x)?.sigmoid()?.mul(&shared.forward(x)?)?)
    }
}

/// The family registration.
pub struct Qwen2MoeFamily;

impl Family for Qwen2MoeFamily {
    type Config = Config;

    fn name(&self) -> &'static str {
        "qwen2_moe"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["qwen2_moe", "qwen2moe"]
    }

    fn catalog(&self) -> Vec<ModelInfo> {
        vec![ModelInfo::text("qwen2_moe")
            .examples(&["Qwen/Qwen1.5-MoE-A2.7B-Chat", "Qwen/Qwen2-57B-A14B-Instruct"])
            .moe()
            .gguf("qwen2moe")]
    }

    /// config.json, or a GGUF file's metadata (architecture `qwen2moe`).
    fn config(&self, raw: &Value) -> Result<Config> {
        crate::gguf::qwen2_moe_config(raw)
    }

    fn plan(&self, cfg: &Config, config: &Value) -> Result<ModelPlan> {
        let caches = vec![CacheKind::Full; cfg.num_hidden_layers as usize];
        let scaling = mlx::nn::RopeScaling::None;
        Ok(ModelPlan::text("qwen2_moe", "qwen2_moe", cfg, caches, cfg.vocab_size, cfg.hidden_size)?
            .with_eos(eos_ids(config))
            .with_context(context_length(cfg.max_position_embeddings.unwrap_or(0), &scaling))
            .with_dtype(&field_or::<String>(config, "torch_dtype", "bfloat16".into())?)
            .with_head_dims(&[cfg.head_dim()?]))
    }

    /// Drops precomputed rotary frequencies; a GGUF file's names as Hugging Face's.
    fn rewrite(&self, _cfg: &Config, _plan: &ModelPlan, name: &str, t: Array) -> Result<Vec<(String, Array)>> {
        let name = plugin_api::gguf::hf_name(name, &[]);
        let name = name.as_str();
        if name.contains("self_attn.rotary_emb.inv_freq") {
            return Ok(vec![]);
        }
        Ok(vec![(name.to_string(), t)])
    }

    /// One matmul for q/k/v (biases alike) per layer, and one for gate/up
    /// in the shared experts and the dense MLPs.
    fn fusions(&self, cfg: &Config, _plan: &ModelPlan) -> Vec<Fusion> {
        (0..cfg.num_hidden_layers)
            .flat_map(|i| {
                let p = format!("model.layers.{i}");
                let mlp = if cfg.sparse(i) { format!("{p}.mlp.shared_expert") } else { format!("{p}.mlp") };
                [qkv_fusion(&format!("{p}.self_attn")), gate_up_fusion(&mlp)]
            })
            .collect()
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
        let rope = rope(head_dim, cfg.rope_theta, cfg.rope_traditional, None, 0)?;
        let attention = AttentionShape::new(h, cfg.num_attention_heads, cfg.kv_heads(), head_dim).biases(true, false);
        let moe = MoeShape {
            hidden: h,
            experts: cfg.num_experts,
            top_k: cfg.num_experts_per_tok,
            intermediate: cfg.moe_intermediate_size,
            routing: Routing::SoftmaxTopK { norm_topk: cfg.norm_topk_prob },
            act: GluActivation::Silu,
            shared_intermediate: Some(cfg.shared_expert_intermediate_size),
            shared_gate: true,
        };
        // As mlx-lm's, the model always has its own head.
        let spec = DecoderSpec::new(cfg.vocab_size, h, cfg.num_hidden_layers, false, NormKind::Rms, eps);
        let layout = BlockLayout::pre_norm(NormKind::Rms, eps);
        let lm = DecoderLm::build(w, &spec, |i, p| {
            let mlp = format!("{p}.mlp");
            let ffn: Box<dyn FeedForward> = if cfg.sparse(i) {
                let w = PerExpert::stacked(w, &mlp, cfg.num_experts, &PerExpert::GATE_UP_DOWN)?;
                let moe = SparseMoe::load(&w, &mlp, &moe)?;
                Box::new(SharedExpertMoe { moe, norm_topk: cfg.norm_topk_prob })
            } else {
                Box::new(GatedMlp::load(w, &mlp, h, cfg.intermediate_size)?)
            };
            DecoderBlock::load(w, p, &layout, &attention, rope.clone(), ffn)
        })?;
        Ok(Box::new(lm))
    }
}
