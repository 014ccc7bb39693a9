//! The apertus family (Swiss AI's Apertus): a pre-norm decoder whose norms
//! are named `attention_layernorm` and `feedforward_layernorm`, per-head
//! q/k RMS norms, and a non-gated MLP (`up_proj`, `down_proj`) with the
//! xIELU activation, whose four parameters each layer learns (written here:
//! no other family uses it). Also reads GGUF files of llama.cpp's
//! `apertus` architecture (`gguf.rs`).

use mlx::nn::{Kind, Linear, NormKind, Weights};
use mlx::{where_, Array, Result};
use plugin_api::config::{
    config_error, context_length, eos_ids, field_or, implied_head_dim, named_scaling, nullable, one_of,
    positive_finite, rope, DecoderFields,
};
use plugin_api::layers::{
    qkv_fusion, AttentionShape, BlockLayout, DecoderBlock, DecoderLm, DecoderSpec, FeedForward, LmDrafter,
};
use plugin_api::{CacheKind, DraftRole, Fusion, ModelInfo, ModelPlan};
use plugin_api::{Drafter, Family, FamilyConfig, Model};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The config (config.json's fields; those mlx-lm requires are required).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Config {
    pub hidden_size: i32,
    pub num_hidden_layers: i32,
    pub intermediate_size: i32,
    pub num_attention_heads: i32,
    pub num_key_value_heads: i32,
    pub rms_norm_eps: f32,
    pub vocab_size: i32,
    /// Biases on the MLP's projections.
    pub mlp_bias: bool,
    /// Must be false: attention has no biases.
    pub attention_bias: bool,
    /// Must be false: the blocks are pre-norm.
    pub post_norm: bool,
    /// Must be true: queries and keys are RMS-normed per head.
    pub qk_norm: bool,
    pub rope_theta: f32,
    #[serde(default, deserialize_with = "nullable")]
    pub rope_traditional: bool,
    pub rope_scaling: Option<Value>,
    pub tie_word_embeddings: bool,
    pub max_position_embeddings: i32,
    pub hidden_act: Option<String>,
    /// GGUF files only: each layer's xIELU `[alpha_p, alpha_n, beta, eps]`,
    /// which llama.cpp keeps as metadata rather than tensors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gguf_xielu: Option<Vec<[f32; 4]>>,
}

impl Config {
    /// Features per head.
    fn head_dim(&self) -> i32 {
        self.hidden_size / self.num_attention_heads
    }
}

/// `field` must be `want` (a switch whose other setting mlx-lm does not implement).
fn must_be(field: &str, value: bool, want: bool) -> Result<()> {
    if value != want {
        return Err(config_error(format!("config: field `{field}` is {value}, which this family does not implement")));
    }
    Ok(())
}

impl FamilyConfig for Config {
    /// Every field in range, naming the field otherwise.
    fn check(&self) -> Result<()> {
        one_of("hidden_act", self.hidden_act.as_deref(), &["xielu"])?;
        DecoderFields {
            hidden: self.hidden_size,
            layers: self.num_hidden_layers,
            intermediate: self.intermediate_size,
            heads: self.num_attention_heads,
            kv_heads: self.num_key_value_heads,
            head_dim: implied_head_dim(self.hidden_size, self.num_attention_heads)?,
            vocab: self.vocab_size,
        }
        .check()?;
        must_be("attention_bias", self.attention_bias, false)?;
        must_be("post_norm", self.post_norm, false)?;
        must_be("qk_norm", self.qk_norm, true)?;
        positive_finite("rope_theta", self.rope_theta)?;
        positive_finite("rms_norm_eps", self.rms_norm_eps)?;
        named_scaling("rope_scaling", self.rope_scaling.as_ref(), self.max_position_embeddings)?;
        Ok(())
    }
}

/// The xIELU activation with one layer's learned parameters: a quadratic
/// for positive inputs, an exponential for negative ones, both plus `β·x`.
#[derive(Debug, Clone)]
pub struct Xielu {
    /// `softplus(alpha_p)`: the positive side's quadratic coefficient
    pos: Array,
    /// `β + softplus(alpha_n)`: the negative side's coefficient
    neg: Array,
    /// `β`: the linear term
    beta: Array,
    /// `ε` (just below 0): the negative side's upper clamp
    eps: Array,
}

impl Xielu {
    /// Loads `{prefix}.{alpha_p, alpha_n, beta, eps}`, scalars.
    pub fn load(w: &dyn Weights, prefix: &str) -> Result<Xielu> {
        let scalar = |n: &str| w.tensor(&format!("{prefix}.{n}"), &[], Kind::Float);
        let softplus = |a: Array| a.logaddexp(&a.scalar_like(0.0)?);
        let beta = scalar("beta")?;
        Ok(Xielu {
            pos: softplus(scalar("alpha_p")?)?,
            neg: softplus(scalar("alpha_n")?)?.add(&beta)?,
            beta,
            eps: scalar("eps")?,
        })
    }

    /// `α_p·x² + β·x` where `x > 0`, else `α_n·(expm1(min(x, ε)) − x) + β·x`.
    pub fn forward(&self, x: &Array) -> Result<Array> {
        let linear = self.beta.mul(x)?;
        let positive = self.pos.mul(&x.square()?)?.add(&linear)?;
        let negative = x.minimum(&self.eps)?.expm1()?.sub(x)?.mul(&self.neg)?.add(&linear)?;
        where_(&x.gt(&x.scalar_like(0.0)?)?, &positive, &negative)
    }
}

/// Apertus's MLP: `down(xielu(up(x)))`.
#[derive(Debug, Clone)]
pub struct XieluMlp {
    /// `up_proj`
    up: Linear,
    /// `down_proj`
    down: Linear,
    /// `act_fn`
    act: Xielu,
}

impl XieluMlp {
    /// Loads `{prefix}.{up_proj, down_proj}` (biases when `bias`) and `{prefix}.act_fn`.
    pub fn load(w: &dyn Weights, prefix: &str, hidden: i32, intermediate: i32, bias: bool) -> Result<XieluMlp> {
        Ok(XieluMlp {
            up: Linear::load_with_bias(w, &format!("{prefix}.up_proj"), hidden, intermediate, bias)?,
            down: Linear::load_with_bias(w, &format!("{prefix}.down_proj"), intermediate, hidden, bias)?,
            act: Xielu::load(w, &format!("{prefix}.act_fn"))?,
        })
    }
}

impl FeedForward for XieluMlp {
    fn forward(&self, x: &Array) -> Result<Array> {
        self.down.forward(&self.act.forward(&self.up.forward(x)?)?)
    }
}

/// The family registration.
pub struct ApertusFamily;

impl Family for ApertusFamily {
    type Config = Config;

    fn name(&self) -> &'static str {
        "apertus"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["apertus"]
    }

    fn catalog(&self) -> Vec<ModelInfo> {
        vec![ModelInfo::text("apertus").examples(&["swiss-ai/Apertus-8B-Instruct-2509"]).gguf("apertus")]
    }

    /// config.json, or a GGUF file's metadata (architecture `apertus`).
    fn config(&self, raw: &Value) -> Result<Config> {
        crate::gguf::apertus_config(raw)
    }

    fn plan(&self, cfg: &Config, config: &Value) -> Result<ModelPlan> {
        let mpe = cfg.max_position_embeddings;
        let scaling = named_scaling("rope_scaling", cfg.rope_scaling.as_ref(), mpe)?;
        let caches = vec![CacheKind::Full; cfg.num_hidden_layers as usize];
        Ok(ModelPlan::text("apertus", "apertus", cfg, caches, cfg.vocab_size, cfg.hidden_size)?
            .with_eos(eos_ids(config))
            .with_context(context_length(mpe, &scaling))
            .with_dtype(&field_or::<String>(config, "torch_dtype", "bfloat16".into())?)
            .with_head_dims(&[cfg.head_dim()]))
    }

    /// The xIELU alphas as scalars (Hugging Face stores them `[1]`), and a
    /// tied checkpoint's `lm_head` dropped, as mlx-lm does both. A GGUF
    /// file's names as Hugging Face's, its xIELU parameters (metadata) as
    /// the `act_fn` scalars beside each layer's `up_proj`.
    fn rewrite(&self, cfg: &Config, _plan: &ModelPlan, name: &str, t: Array) -> Result<Vec<(String, Array)>> {
        let name = plugin_api::gguf::hf_name(name, crate::gguf::NAMES);
        let name = name.as_str();
        if cfg.tie_word_embeddings && name.starts_with("lm_head.") {
            return Ok(vec![]);
        }
        if let (Some(params), Some(layer)) = (&cfg.gguf_xielu, name.strip_suffix(".mlp.up_proj.weight")) {
            let i: usize = layer.rsplit('.').next().and_then(|n| n.parse().ok()).unwrap_or(usize::MAX);
            if let Some(p) = params.get(i) {
                let mut out = crate::gguf::xielu_tensors(&format!("{layer}.mlp"), p);
                out.push((name.to_string(), t));
                return Ok(out);
            }
        }
        let alpha = name.ends_with(".act_fn.alpha_p") || name.ends_with(".act_fn.alpha_n");
        let t = if alpha && t.shape() == [1] { t.reshape(&[])? } else { t };
        Ok(vec![(name.to_string(), t)])
    }

    /// One matmul for q/k/v per layer (the MLP has no gate).
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
        let (h, eps, d) = (cfg.hidden_size, cfg.rms_norm_eps, cfg.head_dim());
        // A GGUF file's llama3 scaling comes as llama.cpp's `rope_freqs`
        // factors, which llama.cpp reads when the file has them.
        let from_file = match cfg.gguf_xielu {
            Some(_) => plugin_api::gguf::rope_from_freqs(w, d, cfg.rope_theta, cfg.rope_traditional)?,
            None => None,
        };
        let rope = match from_file {
            Some(r) => r,
            None => {
                rope(d, cfg.rope_theta, cfg.rope_traditional, cfg.rope_scaling.as_ref(), cfg.max_position_embeddings)?
            }
        };
        let attention = AttentionShape::new(h, cfg.num_attention_heads, cfg.num_key_value_heads, d).qk_norms(eps);
        let layout = BlockLayout {
            pre_attn: Some("attention_layernorm"),
            pre_ffn: Some("feedforward_layernorm"),
            ..BlockLayout::pre_norm(NormKind::Rms, eps)
        };
        let spec =
            DecoderSpec::new(cfg.vocab_size, h, cfg.num_hidden_layers, cfg.tie_word_embeddings, NormKind::Rms, eps);
        Ok(Box::new(DecoderLm::build(w, &spec, |_, p| {
            let mlp = XieluMlp::load(w, &format!("{p}.mlp"), h, cfg.intermediate_size, cfg.mlp_bias)?;
            DecoderBlock::load(w, p, &layout, &attention, rope.clone(), Box::new(mlp))
        })?))
    }
}
