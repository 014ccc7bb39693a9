//! The stablelm family (StableLM-3B-4E1T, StableLM 2 1.6B and 12B):
//! LayerNorms (biased), SwiGLU MLPs, partially rotated heads, q/k/v biases
//! where `use_qkv_bias` says, per-head q/k LayerNorms where `qk_layernorm`
//! says (one scale per head, no bias: StableLM 2 12B), and a parallel
//! residual where `use_parallel_residual` says. Its own block: the shared
//! attention has no per-head LayerNorms. Also reads GGUF files of
//! llama.cpp's `stablelm` architecture (`gguf.rs`).

mod gguf;

use mlx::fast::layer_norm;
use mlx::nn::{Embedding, GatedMlp, Kind, Linear, Norm, NormKind, Rope, RopeScaling, Weights};
use mlx::{Array, Result};
use plugin_api::config::DecoderFields;
use plugin_api::config::{config_error, context_length, eos_ids, field_or, implied_head_dim, one_of, positive_finite};
use plugin_api::layers::{decoder_fusions, lm_output, Attention, AttentionShape, LmDrafter, Qkv, Stage};
use plugin_api::{AttnOptions, CacheKind, Caches, DraftRole, Drafter, Family, FamilyConfig, Fusion, Input};
use plugin_api::{Model, ModelInfo, ModelPlan, Output};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The config (config.json's fields, with mlx-lm's defaults).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Config {
    pub vocab_size: i32,
    pub hidden_size: i32,
    pub num_attention_heads: i32,
    pub num_hidden_layers: i32,
    pub num_key_value_heads: i32,
    pub intermediate_size: i32,
    pub rope_theta: f32,
    /// Biases on the q, k and v projections.
    pub use_qkv_bias: bool,
    /// The share of each head's features that rotate.
    pub partial_rotary_factor: f64,
    pub layer_norm_eps: f32,
    /// `x + attn(n) + mlp(n)` with one input norm, instead of pre-norm blocks.
    #[serde(default, deserialize_with = "plugin_api::config::nullable")]
    pub use_parallel_residual: bool,
    /// Per-head LayerNorms of the queries and keys.
    #[serde(default, deserialize_with = "plugin_api::config::nullable")]
    pub qk_layernorm: bool,
    #[serde(default)]
    pub max_position_embeddings: Option<i32>,
    /// The MLP runs SwiGLU whatever this says; other activations are refused.
    #[serde(default)]
    pub hidden_act: Option<String>,
    /// mlx-lm's stablelm ropes without scaling.
    #[serde(default)]
    pub rope_scaling: Option<Value>,
    /// Set for a GGUF file, whose metadata does not say whether the q/k/v
    /// biases and per-head q/k norms are there: they are read when the
    /// file has them.
    #[serde(default, skip_serializing)]
    pub optional_tensors_from_weights: bool,
}

impl Config {
    fn head_dim(&self) -> Result<i32> {
        implied_head_dim(self.hidden_size, self.num_attention_heads)
    }

    /// mlx-lm's `int(partial_rotary_factor · head_dim)`.
    fn rotary_dims(&self) -> Result<i32> {
        Ok((self.partial_rotary_factor * self.head_dim()? as f64) as i32)
    }
}

impl FamilyConfig for Config {
    fn check(&self) -> Result<()> {
        one_of("hidden_act", self.hidden_act.as_deref(), &["silu", "swish"])?;
        if self.rope_scaling.as_ref().is_some_and(|v| !v.is_null()) {
            return Err(config_error(
                "config: field `rope_scaling` is set, which the stablelm family does not implement",
            ));
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
        let p = self.partial_rotary_factor;
        if !(p > 0.0 && p <= 1.0) {
            return Err(config_error(format!("config: field `partial_rotary_factor` is {p}, must be in (0, 1]")));
        }
        positive_finite("rope_theta", self.rope_theta)?;
        positive_finite("layer_norm_eps", self.layer_norm_eps)
    }
}

/// One scale per head over a LayerNorm without weight or bias (mlx-lm's
/// `LayerNormPerHead`): `{prefix}.norms.{i}.weight` stacked to `[heads, d]`.
#[derive(Debug)]
struct HeadLayerNorm {
    weight: Array,
    eps: f32,
}

impl HeadLayerNorm {
    fn load(w: &dyn Weights, prefix: &str, heads: i32, d: i32, eps: f32) -> Result<Self> {
        let norms = (0..heads)
            .map(|i| w.tensor(&format!("{prefix}.norms.{i}.weight"), &[d], Kind::Float))
            .collect::<Result<Vec<_>>>()?;
        Ok(HeadLayerNorm { weight: mlx::stack(&norms.iter().collect::<Vec<_>>(), 0)?, eps })
    }

    /// Norms `x` `[B, L, heads, d]`.
    fn forward(&self, x: &Array) -> Result<Array> {
        self.weight.mul(&layer_norm(x, None, None, self.eps)?)
    }
}

/// The attention: the shared one, or (with per-head q/k LayerNorms) its
/// projections and rope around the norms, normed before the heads turn.
#[derive(Debug)]
struct SelfAttention {
    attn: Attention,
    qk_norms: Option<(HeadLayerNorm, HeadLayerNorm)>,
}

impl SelfAttention {
    fn load(w: &dyn Weights, prefix: &str, cfg: &Config, rope: Rope) -> Result<Self> {
        let (hq, hkv, d) = (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim()?);
        let shape = AttentionShape::new(cfg.hidden_size, hq, hkv, d).biases(cfg.use_qkv_bias, false);
        let attn = Attention::load(w, prefix, &shape, rope)?;
        let qk_norms = if cfg.qk_layernorm {
            if attn.n_heads != hq {
                return Err(mlx::Error::msg(
                    "stablelm: per-head q/k layernorms do not split over tensor-parallel ranks",
                ));
            }
            let eps = cfg.layer_norm_eps;
            Some((
                HeadLayerNorm::load(w, &format!("{prefix}.q_layernorm"), hq, d, eps)?,
                HeadLayerNorm::load(w, &format!("{prefix}.k_layernorm"), hkv, d, eps)?,
            ))
        } else {
            None
        };
        Ok(SelfAttention { attn, qk_norms })
    }

    fn forward(&self, x: &Array, caches: &mut Caches<'_>, slot: usize) -> Result<Array> {
        let Some((qn, kn)) = &self.qk_norms else { return self.attn.forward(x, caches, slot) };
        let a = &self.attn;
        let (b, l, d) = (x.dim(0), x.dim(1), a.head_dim);
        let (q, k, v) = match &a.proj {
            Qkv::Fused(p) => {
                let mut p = p.forward(x)?.split_at(&[a.n_heads * d, (a.n_heads + a.n_kv_heads) * d], -1)?;
                let v = p.pop().expect("3 parts");
                let k = p.pop().expect("3 parts");
                (p.pop().expect("3 parts"), k, v)
            }
            Qkv::Split { q, k: Some(k), v: Some(v) } => (q.forward(x)?, k.forward(x)?, v.forward(x)?),
            Qkv::Split { .. } => return Err(mlx::Error::msg("stablelm: attention without k/v projections")),
        };
        let heads = |t: &Array, h: i32| t.reshape(&[b, l, h, d]);
        let turn = |t: Array| t.transpose(&[0, 2, 1, 3]);
        let pos = caches.position(slot)?;
        let q = a.rope.forward(&turn(qn.forward(&heads(&q, a.n_heads)?)?)?, pos.rope())?;
        let k = a.rope.forward(&turn(kn.forward(&heads(&k, a.n_kv_heads)?)?)?, pos.rope())?;
        let v = turn(heads(&v, a.n_kv_heads)?)?;
        let o = caches.attend(slot, q, k, v, AttnOptions::causal(a.scale))?;
        a.o.forward(&o.transpose(&[0, 2, 1, 3])?.reshape(&[b, l, -1])?)
    }
}

/// One decoder layer: input norm, attention, MLP, and (unless the residual
/// is parallel) the norm before the MLP.
#[derive(Debug)]
struct DecoderLayer {
    self_attn: SelfAttention,
    mlp: GatedMlp,
    input_layernorm: Norm,
    post_attention_layernorm: Option<Norm>,
}

impl DecoderLayer {
    fn load(w: &dyn Weights, p: &str, cfg: &Config, rope: Rope) -> Result<Self> {
        let (h, eps) = (cfg.hidden_size, cfg.layer_norm_eps);
        let norm = |n: &str| NormKind::Layer { bias: true }.load(w, &format!("{p}.{n}"), h, eps);
        Ok(DecoderLayer {
            self_attn: SelfAttention::load(w, &format!("{p}.self_attn"), cfg, rope)?,
            mlp: GatedMlp::load(w, &format!("{p}.mlp"), h, cfg.intermediate_size)?,
            input_layernorm: norm("input_layernorm")?,
            post_attention_layernorm: (!cfg.use_parallel_residual)
                .then(|| norm("post_attention_layernorm"))
                .transpose()?,
        })
    }

    fn forward(&self, x: &Array, caches: &mut Caches<'_>, slot: usize) -> Result<Array> {
        let h = self.input_layernorm.forward(x)?;
        let r = self.self_attn.forward(&h, caches, slot)?;
        match &self.post_attention_layernorm {
            None => x.add(&r)?.add(&self.mlp.forward(&h)?),
            Some(post) => {
                let h = x.add(&r)?;
                h.add(&self.mlp.forward(&post.forward(&h)?)?)
            }
        }
    }
}

/// The model: embedding, layers (this rank's, in a pipeline split), final
/// norm and `lm_head`.
#[derive(Debug)]
struct StableLm {
    embed_tokens: Embedding,
    layers: Vec<DecoderLayer>,
    stage: Option<Stage>,
    hidden: i32,
    norm: Norm,
    lm_head: Linear,
}

impl StableLm {
    fn load(w: &dyn Weights, cfg: &Config) -> Result<Self> {
        let (h, n) = (cfg.hidden_size, cfg.num_hidden_layers);
        let rope = Rope::new(cfg.rotary_dims()?, cfg.rope_theta, false, &RopeScaling::None)?;
        let stage = Stage::of(w, n)?;
        let layers = (0..n)
            .filter(|&i| Stage::holds(stage.as_ref(), i as usize))
            .map(|i| DecoderLayer::load(w, &format!("model.layers.{i}"), cfg, rope.clone()))
            .collect::<Result<Vec<_>>>()?;
        Ok(StableLm {
            embed_tokens: Embedding::load(w, "model.embed_tokens", cfg.vocab_size, h)?,
            layers,
            stage,
            hidden: h,
            norm: NormKind::Layer { bias: true }.load(w, "model.norm", h, cfg.layer_norm_eps)?,
            lm_head: Linear::load(w, "lm_head", h, cfg.vocab_size)?,
        })
    }
}

impl Model for StableLm {
    fn forward(&mut self, input: &Input, caches: &mut Caches<'_>) -> Result<Output> {
        let stage = self.stage.as_ref();
        let shape = [input.tokens.dim(0), input.tokens.dim(1), self.hidden];
        let mut x = Stage::enter(stage, &shape, self.embed_tokens.dtype(), || input.embed(&self.embed_tokens))?;
        let first = stage.map_or(0, |s| s.layers.start);
        for (i, layer) in self.layers.iter().enumerate() {
            x = layer.forward(&x, caches, first + i)?;
        }
        let x = self.norm.forward(&Stage::leave(stage, x, input)?)?;
        lm_output(x, input.logits, input.want_hidden, |x| self.lm_head.forward(x))
    }
}

/// The family registration.
pub struct StableLmFamily;

impl Family for StableLmFamily {
    type Config = Config;

    fn name(&self) -> &'static str {
        "stablelm"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["stablelm"]
    }

    /// config.json, or a GGUF file's metadata (architecture `stablelm`).
    fn config(&self, raw: &Value) -> Result<Config> {
        gguf::config(raw)
    }

    /// A GGUF file's tensor names in Hugging Face's terms; others as they are.
    fn rewrite(&self, _cfg: &Config, _plan: &ModelPlan, name: &str, t: Array) -> Result<Vec<(String, Array)>> {
        gguf::rewrite(name, t)
    }

    fn catalog(&self) -> Vec<ModelInfo> {
        vec![ModelInfo::text("stablelm")
            .examples(&[
                "stabilityai/stablelm-2-1_6b-chat",
                "stabilityai/stablelm-2-12b-chat",
                "stabilityai/stablelm-3b-4e1t",
            ])
            .gguf("stablelm")]
    }

    fn plan(&self, cfg: &Config, config: &Value) -> Result<ModelPlan> {
        let caches = vec![CacheKind::Full; cfg.num_hidden_layers as usize];
        Ok(ModelPlan::text("stablelm", "stablelm", cfg, caches, cfg.vocab_size, cfg.hidden_size)?
            .with_eos(eos_ids(config))
            .with_context(context_length(cfg.max_position_embeddings.unwrap_or(0), &RopeScaling::None))
            .with_dtype(&field_or::<String>(config, "torch_dtype", "bfloat16".into())?)
            .with_head_dims(&[cfg.head_dim()?]))
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
        if !cfg.optional_tensors_from_weights {
            return Ok(Box::new(StableLm::load(w, cfg)?));
        }
        let any =
            |n: &str| (0..cfg.num_hidden_layers).any(|i| w.get(&format!("model.layers.{i}.self_attn.{n}")).is_some());
        let found = Config {
            use_qkv_bias: any("q_proj.bias") || any("qkv_proj.bias"),
            qk_layernorm: any("q_layernorm.norms.0.weight"),
            ..cfg.clone()
        };
        Ok(Box::new(StableLm::load(w, &found)?))
    }
}

#[cfg(feature = "export")]
plugin_api::export_plugin!("famlx-plugin-stablelm", [StableLmFamily]);
