//! The hunyuan_v1_dense family (Tencent's dense Hunyuan): Llama's pre-norm
//! decoder whose attention RMS-norms queries and keys per head *after* the
//! rope (`query_layernorm`, `key_layernorm`), so its blocks are written
//! here around the shared attention's projections; the rope's base is
//! stretched by NTK-alpha (`rope_scaling.alpha`: base·α^(d/(d−2))).
//! Also reads GGUF files of llama.cpp's `hunyuan-dense` architecture
//! (`gguf.rs`).

use mlx::nn::{Embedding, GatedMlp, OutputHead, RmsNorm, Rope, RopeScaling, Weights};
use mlx::{arange, Array, Dtype, Result};
use plugin_api::config::{
    config_error, context_length, eos_ids, field_or, nullable, one_of, positive_finite, DecoderFields,
};
use plugin_api::family::{Caches, Input, Output};
use plugin_api::layers::{decoder_fusions, lm_output, Attention, AttentionShape, LmDrafter, Qkv, Stage};
use plugin_api::{AttnOptions, CacheKind, DraftRole, Fusion, ModelInfo, ModelPlan};
use plugin_api::{Drafter, Family, FamilyConfig, Model};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The config (config.json's fields; defaults as mlx-lm's).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Config {
    pub hidden_size: i32,
    pub num_hidden_layers: i32,
    pub intermediate_size: i32,
    pub num_attention_heads: i32,
    pub num_key_value_heads: i32,
    /// Default (absent or `null`): `hidden_size / num_attention_heads`.
    #[serde(default, deserialize_with = "nullable")]
    pub head_dim: Option<i32>,
    pub rms_norm_eps: f32,
    pub vocab_size: i32,
    /// Biases on the q, k, v and output projections. Default: false.
    #[serde(default, deserialize_with = "nullable")]
    pub attention_bias: bool,
    /// Must be false: the MLP has no biases.
    #[serde(default, deserialize_with = "nullable")]
    pub mlp_bias: bool,
    /// Queries and keys RMS-normed per head after the rope. Default: true.
    #[serde(default = "default_true", deserialize_with = "true_or_default")]
    pub use_qk_norm: bool,
    /// Default (absent or `null`): 10000.
    #[serde(default = "default_rope_theta", deserialize_with = "rope_theta_or_default")]
    pub rope_theta: f32,
    /// Only `alpha` is read (NTK-alpha); none: α = 1.
    pub rope_scaling: Option<Value>,
    /// Default (absent or `null`): 32768.
    #[serde(default = "default_context", deserialize_with = "context_or_default")]
    pub max_position_embeddings: i32,
    #[serde(default, deserialize_with = "nullable")]
    pub tie_word_embeddings: bool,
    pub hidden_act: Option<String>,
}

plugin_api::config_defaults! {
    default_true / true_or_default: bool = true;
    // mlx-lm's rope base and context when a config has none (or `null`).
    default_rope_theta / rope_theta_or_default: f32 = 10000.0;
    default_context / context_or_default: i32 = 32768;
}

impl Config {
    /// Features per head.
    fn head_dim(&self) -> i32 {
        self.head_dim.unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }

    /// NTK-alpha's α: `rope_scaling.alpha` (1 without a scaling).
    fn alpha(&self) -> Result<f32> {
        let Some(s) = self.rope_scaling.as_ref().filter(|s| !s.is_null()) else { return Ok(1.0) };
        match s.get("alpha").and_then(Value::as_f64) {
            Some(a) if a.is_finite() && a > 0.0 => Ok(a as f32),
            _ => Err(config_error("config: field `rope_scaling.alpha` must be a positive number (NTK-alpha)")),
        }
    }

    /// The rope: periods `(θ·α^(d/(d−2)))^(2i/d)` over halves of each head,
    /// computed with MLX's ops as mlx-lm computes them.
    fn rope(&self) -> Result<Rope> {
        let d = self.head_dim();
        let dims = d as f64;
        let base = self.rope_theta as f64 * (self.alpha()? as f64).powf(dims / (dims - 2.0));
        let exponents = arange(0.0, dims, 2.0, Dtype::I32)?.div(&Array::i32(d))?;
        Ok(Rope::with_freqs(d, false, Array::f32(base as f32).power(&exponents)?))
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
            head_dim: self.head_dim(),
            vocab: self.vocab_size,
        }
        .check()?;
        if self.head_dim() < 3 {
            return Err(config_error(format!("config: field `head_dim` is {}, must be at least 3", self.head_dim())));
        }
        if self.mlp_bias {
            return Err(config_error("config: field `mlp_bias` is true, which this family does not implement"));
        }
        positive_finite("rope_theta", self.rope_theta)?;
        positive_finite("rms_norm_eps", self.rms_norm_eps)?;
        self.alpha().map(|_| ())
    }
}

/// Hunyuan's self-attention: the shared layer's projections and rope, then
/// the per-head q/k norms, then attention over the cache slot.
#[derive(Debug)]
pub struct HunyuanAttention {
    /// projections, rope, heads and scale (its own q/k norms unused: none loaded)
    pub inner: Attention,
    /// `query_layernorm`
    pub q_norm: Option<RmsNorm>,
    /// `key_layernorm`
    pub k_norm: Option<RmsNorm>,
}

impl HunyuanAttention {
    /// Loads `{prefix}.{q,k,v,o}_proj` (or the fused `qkv_proj`) and, with
    /// `qk_norm_eps`, `{prefix}.{query,key}_layernorm`.
    pub fn load(
        w: &dyn Weights,
        prefix: &str,
        shape: &AttentionShape,
        rope: Rope,
        qk_norm_eps: Option<f32>,
    ) -> Result<Self> {
        let norm =
            |n: &str| qk_norm_eps.map(|e| RmsNorm::load(w, &format!("{prefix}.{n}"), shape.head_dim, e)).transpose();
        Ok(HunyuanAttention {
            inner: Attention::load(w, prefix, shape, rope)?,
            q_norm: norm("query_layernorm")?,
            k_norm: norm("key_layernorm")?,
        })
    }

    /// `[B, L, h·d]` → `[B, h, L, d]`.
    fn heads(x: &Array, h: i32, d: i32) -> Result<Array> {
        x.reshape(&[x.dim(0), x.dim(1), h, d])?.transpose(&[0, 2, 1, 3])
    }

    /// q, k and v, each `[B, L, h·d]`.
    fn project(&self, x: &Array) -> Result<(Array, Array, Array)> {
        let a = &self.inner;
        match &a.proj {
            Qkv::Split { q, k: Some(k), v: Some(v) } => Ok((q.forward(x)?, k.forward(x)?, v.forward(x)?)),
            Qkv::Fused(p) => {
                let (q, kv) = (a.n_heads * a.head_dim, a.n_kv_heads * a.head_dim);
                let mut parts = p.forward(x)?.split_at(&[q, q + kv], -1)?;
                let v = parts.pop().expect("3 parts");
                let k = parts.pop().expect("3 parts");
                Ok((parts.pop().expect("3 parts"), k, v))
            }
            Qkv::Split { .. } => Err(mlx::Error::msg("hunyuan: attention without k/v projections")),
        }
    }

    /// `x` `[B, L, hidden]`: appends its K/V to cache `slot` and attends over it.
    pub fn forward(&self, x: &Array, caches: &mut Caches<'_>, slot: usize) -> Result<Array> {
        let (a, b, l) = (&self.inner, x.dim(0), x.dim(1));
        let pos = caches.position(slot)?;
        let (q, k, v) = self.project(x)?;
        let normed = |t: Array, n: &Option<RmsNorm>| match n {
            Some(n) => n.forward(&t),
            None => Ok(t),
        };
        let q = normed(a.rope.forward(&Self::heads(&q, a.n_heads, a.head_dim)?, pos.rope())?, &self.q_norm)?;
        let k = normed(a.rope.forward(&Self::heads(&k, a.n_kv_heads, a.head_dim)?, pos.rope())?, &self.k_norm)?;
        let v = Self::heads(&v, a.n_kv_heads, a.head_dim)?;
        let o = caches.attend(slot, q, k, v, AttnOptions::causal(a.scale))?;
        a.o.forward(&o.transpose(&[0, 2, 1, 3])?.reshape(&[b, l, -1])?)
    }
}

/// One pre-norm block: `h = x + attn(input_layernorm(x));
/// out = h + mlp(post_attention_layernorm(h))`.
#[derive(Debug)]
pub struct Block {
    /// self-attention
    pub attn: HunyuanAttention,
    /// the SwiGLU MLP
    pub mlp: GatedMlp,
    /// norm before attention
    pub input_layernorm: RmsNorm,
    /// norm before the MLP
    pub post_attention_layernorm: RmsNorm,
}

impl Block {
    fn forward(&self, x: &Array, caches: &mut Caches<'_>, slot: usize) -> Result<Array> {
        let h = x.add(&self.attn.forward(&self.input_layernorm.forward(x)?, caches, slot)?)?;
        h.add(&self.mlp.forward(&self.post_attention_layernorm.forward(&h)?)?)
    }
}

/// The language model: embedding, blocks (one cache slot each), final norm, head.
#[derive(Debug)]
pub struct HunyuanLm {
    /// token embedding
    pub embed: Embedding,
    /// blocks (of a pipeline split: this rank's)
    pub blocks: Vec<Block>,
    /// this rank's stage of a pipeline split
    pub stage: Option<Stage>,
    /// width of the residual stream
    pub hidden: i32,
    /// final norm
    pub norm: RmsNorm,
    /// output head
    pub head: OutputHead,
}

impl Model for HunyuanLm {
    fn forward(&mut self, input: &Input, caches: &mut Caches<'_>) -> Result<Output> {
        let stage = self.stage.as_ref();
        let shape = [input.tokens.dim(0), input.tokens.dim(1), self.hidden];
        let mut h = Stage::enter(stage, &shape, self.embed.dtype(), || input.embed(&self.embed))?;
        let first = stage.map_or(0, |s| s.layers.start);
        for (i, b) in self.blocks.iter().enumerate() {
            h = b.forward(&h, caches, first + i)?;
        }
        let h = self.norm.forward(&Stage::leave(stage, h, input)?)?;
        lm_output(h, input.logits, input.want_hidden, |x| self.head.forward(x))
    }
}

/// The family registration.
pub struct HunyuanV1DenseFamily;

impl Family for HunyuanV1DenseFamily {
    type Config = Config;

    fn name(&self) -> &'static str {
        "hunyuan_v1_dense"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["hunyuan_v1_dense", "hunyuan-dense"]
    }

    fn catalog(&self) -> Vec<ModelInfo> {
        vec![ModelInfo::text("hunyuan_v1_dense").examples(&["tencent/Hunyuan-7B-Instruct"]).gguf("hunyuan-dense")]
    }

    /// config.json, or a GGUF file's metadata (architecture `hunyuan-dense`).
    fn config(&self, raw: &Value) -> Result<Config> {
        crate::gguf::hunyuan_dense_config(raw)
    }

    fn plan(&self, cfg: &Config, config: &Value) -> Result<ModelPlan> {
        let caches = vec![CacheKind::Full; cfg.num_hidden_layers as usize];
        Ok(ModelPlan::text("hunyuan_v1_dense", "hunyuan_v1_dense", cfg, caches, cfg.vocab_size, cfg.hidden_size)?
            .with_eos(eos_ids(config))
            .with_context(context_length(cfg.max_position_embeddings, &RopeScaling::None))
            .with_dtype(&field_or::<String>(config, "torch_dtype", "bfloat16".into())?)
            .with_head_dims(&[cfg.head_dim()]))
    }

    /// A tied checkpoint's `lm_head` tensors are dropped, as mlx-lm drops them.
    fn rewrite(&self, cfg: &Config, _plan: &ModelPlan, name: &str, t: Array) -> Result<Vec<(String, Array)>> {
        let name = plugin_api::gguf::hf_name(name, crate::gguf::NAMES);
        if cfg.tie_word_embeddings && name.starts_with("lm_head.") {
            return Ok(vec![]);
        }
        Ok(vec![(name, t)])
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
        let (h, eps, n) = (cfg.hidden_size, cfg.rms_norm_eps, cfg.num_hidden_layers);
        let rope = cfg.rope()?;
        let shape = AttentionShape::new(h, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim())
            .biases(cfg.attention_bias, cfg.attention_bias);
        let qk_norm_eps = cfg.use_qk_norm.then_some(eps);
        let stage = Stage::of(w, n)?;
        let blocks = (0..n)
            .filter(|&i| Stage::holds(stage.as_ref(), i as usize))
            .map(|i| {
                let p = format!("model.layers.{i}");
                let norm = |m: &str| RmsNorm::load(w, &format!("{p}.{m}"), h, eps);
                Ok(Block {
                    attn: HunyuanAttention::load(w, &format!("{p}.self_attn"), &shape, rope.clone(), qk_norm_eps)?,
                    mlp: GatedMlp::load(w, &format!("{p}.mlp"), h, cfg.intermediate_size)?,
                    input_layernorm: norm("input_layernorm")?,
                    post_attention_layernorm: norm("post_attention_layernorm")?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let embed = Embedding::load(w, "model.embed_tokens", cfg.vocab_size, h)?;
        Ok(Box::new(HunyuanLm {
            head: OutputHead::load(w, "lm_head", &embed, cfg.tie_word_embeddings, h, cfg.vocab_size)?,
            embed,
            blocks,
            stage,
            hidden: h,
            norm: RmsNorm::load(w, "model.norm", h, eps)?,
        }))
    }
}
