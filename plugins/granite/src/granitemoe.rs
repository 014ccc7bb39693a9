//! The granitemoe family (IBM Granite 3 MoE): Granite's decoder and
//! multipliers with every MLP a sparse mixture of experts under
//! `block_sparse_moe`: a router (`router.layer`) whose top-k logits are
//! softmaxed in float32 into the chosen experts' weights.
//!
//! Also reads GGUF files of llama.cpp's `granitemoe` architecture (`gguf.rs`).

use crate::granite::{check_multipliers, quant_class};
use mlx::nn::{GluActivation, Linear, NormKind, SwitchGlu, Weights};
use mlx::{Array, Dtype, Result};
use plugin_api::config::{
    context_length, eos_ids, field_or, implied_head_dim, in_range, limits, named_scaling, one_of, positive_finite,
    rope, DecoderFields,
};
use plugin_api::layers::{
    qkv_fusion, AttentionShape, BlockLayout, DecoderBlock, DecoderLm, DecoderSpec, FeedForward, LmDrafter, LogitOps,
};
use plugin_api::{CacheKind, DraftRole, Fusion, ModelInfo, ModelPlan, QuantClass};
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
    pub rope_theta: f32,
    pub num_local_experts: i32,
    pub num_experts_per_tok: i32,
    pub rope_scaling: Option<Value>,
    /// Default (absent or `null`): true.
    #[serde(default = "default_tied", deserialize_with = "tied_or_default")]
    pub tie_word_embeddings: bool,
    pub hidden_act: Option<String>,
}

plugin_api::config_defaults! {
    // mlx-lm's granitemoe default.
    default_tied / tied_or_default: bool = true;
}

impl Config {
    /// Features per head: Granite always splits the width over the heads.
    fn head_dim(&self) -> Result<i32> {
        implied_head_dim(self.hidden_size, self.num_attention_heads)
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
            head_dim: self.head_dim()?,
            vocab: self.vocab_size,
        }
        .check()?;
        in_range("num_local_experts", self.num_local_experts, limits::EXPERTS)?;
        in_range("num_experts_per_tok", self.num_experts_per_tok, self.num_local_experts)?;
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

/// Granite-MoE's experts: the router's top-k logits, softmaxed in float32,
/// weigh the chosen experts' outputs.
#[derive(Debug)]
pub struct GraniteMoe {
    /// hidden → experts
    pub router: Linear,
    /// the routed experts, stacked
    pub experts: SwitchGlu,
    /// experts per token
    pub top_k: i32,
}

impl GraniteMoe {
    /// Loads `{prefix}.router.layer` and `{prefix}.switch_mlp.{gate,up,down}_proj`.
    pub fn load(w: &dyn Weights, prefix: &str, cfg: &Config) -> Result<GraniteMoe> {
        let (h, e) = (cfg.hidden_size, cfg.num_local_experts);
        Ok(GraniteMoe {
            router: Linear::load(w, &format!("{prefix}.router.layer"), h, e)?,
            experts: SwitchGlu::load(
                w,
                &format!("{prefix}.switch_mlp"),
                e,
                h,
                cfg.intermediate_size,
                GluActivation::Silu,
            )?,
            top_k: cfg.num_experts_per_tok,
        })
    }
}

impl FeedForward for GraniteMoe {
    fn forward(&self, x: &Array) -> Result<Array> {
        let logits = self.router.forward(x)?;
        let inds = logits.top_k_indices(self.top_k)?;
        let gates = logits.take_along_axis(&inds, -1)?.astype(Dtype::F32)?.softmax(&[-1], false)?;
        let y = self.experts.forward(x, &inds.astype(Dtype::U32)?)?;
        y.mul(&gates.expand_dims(&[-1])?)?.sum(&[-2], false)?.astype(y.dtype())
    }
}

/// The family registration.
pub struct GraniteMoeFamily;

impl Family for GraniteMoeFamily {
    type Config = Config;

    fn name(&self) -> &'static str {
        "granitemoe"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["granitemoe"]
    }

    fn catalog(&self) -> Vec<ModelInfo> {
        vec![ModelInfo::text("granitemoe")
            .examples(&["ibm-granite/granite-3.1-3b-a800m-instruct", "ibm-granite/granite-3.0-1b-a400m-instruct"])
            .moe()
            .gguf("granitemoe")]
    }

    /// config.json, or a GGUF file's metadata (architecture `granitemoe`).
    fn config(&self, raw: &Value) -> Result<Config> {
        crate::gguf::granitemoe_config(raw)
    }

    fn plan(&self, cfg: &Config, config: &Value) -> Result<ModelPlan> {
        let scaling = named_scaling("rope_scaling", cfg.rope_scaling.as_ref(), cfg.max_position_embeddings)?;
        let caches = vec![CacheKind::Full; cfg.num_hidden_layers as usize];
        Ok(ModelPlan::text("granitemoe", "granitemoe", cfg, caches, cfg.vocab_size, cfg.hidden_size)?
            .with_eos(eos_ids(config))
            .with_context(context_length(cfg.max_position_embeddings, &scaling))
            .with_dtype(&field_or::<String>(config, "torch_dtype", "bfloat16".into())?)
            .with_head_dims(&[cfg.head_dim()?]))
    }

    /// Hugging Face's expert layout into mlx-lm's: `input_linear` (gate and
    /// up rows of every expert, stacked) split into `switch_mlp.gate_proj`
    /// and `up_proj`, `output_linear` renamed `switch_mlp.down_proj`; a tied
    /// checkpoint's stray `lm_head.weight` dropped. A GGUF file's tensors
    /// are put in Hugging Face's terms first (its experts come stacked).
    fn rewrite(&self, cfg: &Config, _plan: &ModelPlan, name: &str, t: Array) -> Result<Vec<(String, Array)>> {
        let (name, t) = crate::gguf::hf_tensor(name, t, cfg.num_attention_heads, cfg.num_key_value_heads, true)?;
        let name = name.as_str();
        if cfg.tie_word_embeddings && name == "lm_head.weight" {
            return Ok(vec![]);
        }
        if let Some(p) = name.strip_suffix(".block_sparse_moe.input_linear.weight") {
            let mut halves = t.split_at(&[t.dim(1) / 2], 1)?;
            let up = halves.pop().expect("2 parts");
            let gate = halves.pop().expect("2 parts");
            return Ok(vec![
                (format!("{p}.block_sparse_moe.switch_mlp.gate_proj.weight"), gate),
                (format!("{p}.block_sparse_moe.switch_mlp.up_proj.weight"), up),
            ]);
        }
        if let Some(p) = name.strip_suffix(".block_sparse_moe.output_linear.weight") {
            return Ok(vec![(format!("{p}.block_sparse_moe.switch_mlp.down_proj.weight"), t)]);
        }
        Ok(vec![(name.to_string(), t)])
    }

    /// As granite's, and the router at 8 bits too.
    fn quant_class(&self, _cfg: &Config, _plan: &ModelPlan, name: &str) -> QuantClass {
        quant_class(name, &["block_sparse_moe.router.layer"])
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
        let rope = rope(head_dim, cfg.rope_theta, false, cfg.rope_scaling.as_ref(), cfg.max_position_embeddings)?;
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
            let experts = GraniteMoe::load(w, &format!("{p}.block_sparse_moe"), cfg)?;
            DecoderBlock::load(w, p, &layout, &attention, rope.clone(), Box::new(experts))
        })?))
    }
}
