//! The phimoe family (Phi-3.5-MoE, Phi-mini-MoE): pre-norm blocks with
//! LayerNorms (biased), biases on every attention projection, LongRoPE, and
//! a mixture of SwiGLU experts chosen by sparsemixer routing; an output head
//! with a bias. Also reads GGUF files of llama.cpp's `phimoe` architecture
//! (`gguf_moe.rs`).

use mlx::nn::{GluActivation, Kind, NormKind, Rope, RopeScaling, Weights};
use mlx::{concatenate, where_, Array, Result};
use plugin_api::config::{config_error, context_length, eos_ids, field_or, implied_head_dim, one_of, positive_finite};
use plugin_api::config::{in_range, limits, DecoderFields};
use plugin_api::layers::{qkv_fusion, AttentionShape, BlockLayout, DecoderBlock, DecoderLm, DecoderSpec, LmDrafter};
use plugin_api::layers::{FeedForward, MoeShape, PerExpert, Routing, SparseMoe};
use plugin_api::{CacheKind, DraftRole, Drafter, Family, FamilyConfig, Fusion, Model, ModelInfo, ModelPlan};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The config (config.json's fields, with mlx-lm's defaults).
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
    #[serde(default = "default_kv_heads", deserialize_with = "kv_heads_or_default")]
    pub num_key_value_heads: i32,
    #[serde(default = "default_max_positions", deserialize_with = "max_positions_or_default")]
    pub max_position_embeddings: i32,
    /// The context LongRoPE's magnitude scale is measured against.
    #[serde(default = "default_original", deserialize_with = "original_or_default")]
    pub original_max_position_embeddings: i32,
    /// The epsilon of the (Layer) norms, under its Hugging Face name.
    #[serde(default = "default_eps", deserialize_with = "eps_or_default")]
    pub rms_norm_eps: f32,
    /// `null`: plain rope; else LongRoPE (`long_factor`, `long_mscale`).
    #[serde(default)]
    pub rope_scaling: Option<Value>,
    #[serde(default = "default_experts", deserialize_with = "experts_or_default")]
    pub num_local_experts: i32,
    #[serde(default = "default_top_k", deserialize_with = "top_k_or_default")]
    pub num_experts_per_tok: i32,
    #[serde(default = "default_theta", deserialize_with = "theta_or_default")]
    pub rope_theta: f32,
    /// Sparsemixer's band: experts within `2·jitter` (relative) of the best
    /// share its softmax.
    #[serde(default = "default_jitter", deserialize_with = "jitter_or_default")]
    pub router_jitter_noise: f64,
    /// The experts run SwiGLU whatever this says; other activations are refused.
    #[serde(default)]
    pub hidden_act: Option<String>,
    /// mlx-lm's phimoe always has attention biases.
    #[serde(default)]
    pub attention_bias: Option<bool>,
    /// mlx-lm's phimoe always has an output-head bias.
    #[serde(default)]
    pub lm_head_bias: Option<bool>,
    /// Set for a GGUF file, which holds LongRoPE's long factors as a
    /// tensor: `rope_scaling.long_factor` is a placeholder for them.
    #[serde(default, skip_serializing)]
    pub long_factor_from_weights: bool,
}

plugin_api::config_defaults! {
    default_vocab / vocab_or_default: i32 = 32064;
    default_hidden / hidden_or_default: i32 = 4096;
    default_intermediate / intermediate_or_default: i32 = 6400;
    default_layers / layers_or_default: i32 = 32;
    default_heads / heads_or_default: i32 = 32;
    default_kv_heads / kv_heads_or_default: i32 = 8;
    default_max_positions / max_positions_or_default: i32 = 131072;
    default_original / original_or_default: i32 = 4096;
    default_eps / eps_or_default: f32 = 1e-6;
    default_experts / experts_or_default: i32 = 16;
    default_top_k / top_k_or_default: i32 = 2;
    default_theta / theta_or_default: f32 = 10000.0;
    default_jitter / jitter_or_default: f64 = 0.01;
}

/// The LongRoPE entry as mlx-lm's phimoe reads it.
#[derive(Debug, Clone, Deserialize)]
struct LongRope {
    #[serde(rename = "type", alias = "rope_type", default)]
    kind: Option<String>,
    long_factor: Vec<f32>,
    #[serde(default)]
    long_mscale: Option<f32>,
}

impl Config {
    fn head_dim(&self) -> Result<i32> {
        implied_head_dim(self.hidden_size, self.num_attention_heads)
    }

    /// The rope scaling: none, or LongRoPE with its magnitude scale
    /// (`long_mscale`, or the one the context stretch implies).
    fn scaling(&self) -> Result<RopeScaling> {
        let Some(v) = self.rope_scaling.as_ref().filter(|v| !v.is_null()) else {
            return Ok(RopeScaling::None);
        };
        let s: LongRope = plugin_api::config::parse(v)
            .map_err(|e| config_error(e.msg.replace("config: ", "config: rope_scaling: ")))?;
        one_of("rope_scaling.type", s.kind.as_deref(), &["longrope", "su"])?;
        in_range("original_max_position_embeddings", self.original_max_position_embeddings, i32::MAX)?;
        let pairs = self.head_dim()? / 2;
        if s.long_factor.len() != pairs as usize {
            let n = s.long_factor.len();
            return Err(config_error(format!(
                "config: field `rope_scaling.long_factor` has {n} entries, the rotated features need {pairs}"
            )));
        }
        let stretch = self.max_position_embeddings as f64 / self.original_max_position_embeddings as f64;
        let mscale = match s.long_mscale.filter(|&m| m != 0.0) {
            Some(m) => m,
            None if stretch <= 1.0 => 1.0,
            None => (1.0 + stretch.ln() / (self.original_max_position_embeddings as f64).ln()).sqrt() as f32,
        };
        Ok(RopeScaling::LongRope { long_factor: s.long_factor, mscale })
    }
}

impl FamilyConfig for Config {
    fn check(&self) -> Result<()> {
        one_of("hidden_act", self.hidden_act.as_deref(), &["silu", "swish"])?;
        for (field, v) in [("attention_bias", self.attention_bias), ("lm_head_bias", self.lm_head_bias)] {
            if v == Some(false) {
                return Err(config_error(format!(
                    "config: field `{field}` is false, which the phimoe family does not implement"
                )));
            }
        }
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
        in_range("num_local_experts", self.num_local_experts, limits::EXPERTS)?;
        in_range("num_experts_per_tok", self.num_experts_per_tok, self.num_local_experts)?;
        if !(self.router_jitter_noise.is_finite() && self.router_jitter_noise >= 0.0) {
            let j = self.router_jitter_noise;
            return Err(config_error(format!("config: field `router_jitter_noise` is {j}, must be a number >= 0")));
        }
        positive_finite("rope_theta", self.rope_theta)?;
        positive_finite("rms_norm_eps", self.rms_norm_eps)?;
        self.scaling().map(|_| ())
    }
}

/// Sparsemixer's inference path (Hugging Face's, as mlx-lm runs it): `k`
/// rounds, each taking the best expert left; its weight is its softmax share
/// among the experts left whose logit lies within `2·jitter` (relative to
/// `max(|logit|, best)`) of the best, then it is masked out for the next
/// round. Returns the experts `[.., k]` and their weights `[.., k]`.
fn sparsemixer(gates: &Array, k: i32, jitter: f64) -> Result<(Array, Array)> {
    let neg_inf = gates.scalar_like(f64::NEG_INFINITY)?;
    let band_edge = gates.scalar_like(2.0 * jitter)?;
    let mut masked = gates.clone();
    let (mut inds, mut scores) = (Vec::new(), Vec::new());
    for _ in 0..k {
        let top = masked.max(&[-1], true)?;
        let ind = masked.argmax(-1, true)?;
        let factor = gates.abs()?.maximum(&top)?;
        let outside = top.sub(gates)?.div(&factor)?.gt(&band_edge)?;
        let band = where_(&outside, &neg_inf, &masked)?.softmax(&[-1], true)?;
        scores.push(band.take_along_axis(&ind, -1)?);
        masked = masked.put_along_axis(&ind, &neg_inf, -1)?;
        inds.push(ind);
    }
    let cat = |v: &[Array]| concatenate(&v.iter().collect::<Vec<_>>(), -1);
    Ok((cat(&inds)?, cat(&scores)?))
}

/// The experts with sparsemixer routing (the [`SparseMoe`]'s own routing unused).
#[derive(Debug)]
struct SparseMixerMoe {
    moe: SparseMoe,
    jitter: f64,
}

impl FeedForward for SparseMixerMoe {
    fn forward(&self, x: &Array) -> Result<Array> {
        let (inds, scores) = sparsemixer(&self.moe.router.forward(x)?, self.moe.top_k, self.jitter)?;
        self.moe.mix(x, &inds, &scores)
    }
}

/// Hugging Face's names of each expert's projections (`experts.{e}.w1`, ...),
/// with the stacked ones mlx-lm reads.
const HF_EXPERTS: [(&str, &str); 3] = [("w1", "gate_proj"), ("w3", "up_proj"), ("w2", "down_proj")];

/// The family registration.
pub struct PhiMoeFamily;

impl Family for PhiMoeFamily {
    type Config = Config;

    fn name(&self) -> &'static str {
        "phimoe"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["phimoe"]
    }

    /// config.json, or a GGUF file's metadata (architecture `phimoe`).
    fn config(&self, raw: &Value) -> Result<Config> {
        crate::gguf_moe::config(raw)
    }

    /// A GGUF file's tensor names in Hugging Face's terms; others as they are.
    fn rewrite(&self, _cfg: &Config, _plan: &ModelPlan, name: &str, t: Array) -> Result<Vec<(String, Array)>> {
        crate::gguf_moe::rewrite(name, t)
    }

    fn catalog(&self) -> Vec<ModelInfo> {
        vec![ModelInfo::text("phimoe").examples(&["microsoft/Phi-3.5-MoE-instruct"]).moe().gguf("phimoe")]
    }

    fn plan(&self, cfg: &Config, config: &Value) -> Result<ModelPlan> {
        let caches = vec![CacheKind::Full; cfg.num_hidden_layers as usize];
        Ok(ModelPlan::text("phimoe", "phimoe", cfg, caches, cfg.vocab_size, cfg.hidden_size)?
            .with_eos(eos_ids(config))
            .with_context(context_length(cfg.max_position_embeddings, &cfg.scaling()?))
            .with_dtype(&field_or::<String>(config, "torch_dtype", "bfloat16".into())?)
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
        let (h, eps, d) = (cfg.hidden_size, cfg.rms_norm_eps, cfg.head_dim()?);
        let norm = NormKind::Layer { bias: true };
        let scaling = match cfg.scaling()? {
            RopeScaling::LongRope { long_factor, mscale } if cfg.long_factor_from_weights => {
                let factors = w.tensor(crate::gguf_moe::LONG_FACTORS, &[long_factor.len() as i32], Kind::Float)?;
                RopeScaling::LongRope { long_factor: factors.to_vec()?, mscale }
            }
            s => s,
        };
        let rope = Rope::new(d, cfg.rope_theta, false, &scaling)?;
        let attention = AttentionShape::new(h, cfg.num_attention_heads, cfg.num_key_value_heads, d).biases(true, true);
        let layout = BlockLayout::pre_norm(norm, eps);
        let spec = DecoderSpec {
            head_bias: true,
            ..DecoderSpec::new(cfg.vocab_size, h, cfg.num_hidden_layers, false, norm, eps)
        };
        let shape = MoeShape {
            hidden: h,
            experts: cfg.num_local_experts,
            top_k: cfg.num_experts_per_tok,
            intermediate: cfg.intermediate_size,
            routing: Routing::TopKSoftmax,
            act: GluActivation::Silu,
            shared_intermediate: None,
            shared_gate: false,
        };
        let lm = DecoderLm::build(w, &spec, |_, p| {
            let prefix = format!("{p}.block_sparse_moe");
            let experts = PerExpert::stacked(w, &prefix, cfg.num_local_experts, &HF_EXPERTS)?;
            let moe = SparseMoe::load(&experts, &prefix, &shape)?;
            let ffn = SparseMixerMoe { moe, jitter: cfg.router_jitter_noise };
            DecoderBlock::load(w, p, &layout, &attention, rope.clone(), Box::new(ffn))
        })?;
        Ok(Box::new(lm))
    }
}
