//! The cohere family (Command R, Command R+): parallel blocks (attention
//! and the MLP both read one LayerNorm of the input and add to it side by
//! side), interleaved rope on every layer, the tied embedding as the head
//! and logits scaled by `logit_scale`. Command R+ (`use_qk_norm`) also
//! norms queries and keys per head: a LayerNorm with no scale of its own,
//! then a scale per head and feature. Also reads GGUF files of llama.cpp's
//! `command-r` architecture (`gguf.rs`).

use mlx::fast::layer_norm;
use mlx::nn::{GatedMlp, GluActivation, HeadShare, Kind, NormKind, Parallel, Rope, RopeScaling, Weights};
use mlx::{Array, Error, Result};
use plugin_api::config::{context_length, eos_ids, field_or, implied_head_dim, one_of, positive_finite, DecoderFields};
use plugin_api::layers::{
    decoder_fusions, lm_output, Attention, AttentionShape, BlockLayout, DecoderBlock, DecoderLm, DecoderSpec,
    LmDrafter, LogitOps, Qkv, Stage,
};
use plugin_api::{AttnOptions, CacheKind, DraftRole, Fusion, ModelInfo, ModelPlan};
use plugin_api::{Caches, Drafter, Family, FamilyConfig, Input, Model, Output};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The config (config.json's fields; defaults as mlx-lm's).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Config {
    pub hidden_size: i32,
    pub num_hidden_layers: i32,
    pub intermediate_size: i32,
    pub num_attention_heads: i32,
    /// Default: `num_attention_heads`.
    pub num_key_value_heads: Option<i32>,
    pub vocab_size: i32,
    /// Default: 8e6.
    #[serde(default = "default_rope_theta", deserialize_with = "rope_theta_or_default")]
    pub rope_theta: f32,
    /// Default: 1e-5.
    #[serde(default = "default_eps", deserialize_with = "eps_or_default")]
    pub layer_norm_eps: f32,
    /// The logits are multiplied by this. Default: 0.0625.
    #[serde(default = "default_logit_scale", deserialize_with = "logit_scale_or_default")]
    pub logit_scale: f32,
    /// Biases on q/k/v and o. Default: false.
    #[serde(default, deserialize_with = "plugin_api::config::nullable")]
    pub attention_bias: bool,
    /// The LayerNorms have biases. Default: false.
    #[serde(default, deserialize_with = "plugin_api::config::nullable")]
    pub layer_norm_bias: bool,
    /// Per-head q/k LayerNorms (Command R+). Default: false.
    #[serde(default, deserialize_with = "plugin_api::config::nullable")]
    pub use_qk_norm: bool,
    pub max_position_embeddings: Option<i32>,
    pub hidden_act: Option<String>,
    /// Set for a GGUF file, whose metadata does not say whether the q/k
    /// norms are there: they are read when the file has them.
    #[serde(default, skip_serializing)]
    pub qk_norm_from_weights: bool,
}

plugin_api::config_defaults! {
    default_rope_theta / rope_theta_or_default: f32 = 8_000_000.0;
    default_eps / eps_or_default: f32 = 1e-5;
    default_logit_scale / logit_scale_or_default: f32 = 0.0625;
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
            head_dim: implied_head_dim(self.hidden_size, self.num_attention_heads)?,
            vocab: self.vocab_size,
        }
        .check()?;
        positive_finite("rope_theta", self.rope_theta)?;
        positive_finite("layer_norm_eps", self.layer_norm_eps)?;
        positive_finite("logit_scale", self.logit_scale)
    }
}

/// The family registration.
pub struct CohereFamily;

impl Family for CohereFamily {
    type Config = Config;

    fn name(&self) -> &'static str {
        "cohere"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["cohere", "command-r"]
    }

    /// config.json, or a GGUF file's metadata (architecture `command-r`).
    fn config(&self, raw: &Value) -> Result<Config> {
        crate::gguf::cohere_config(raw)
    }

    /// A GGUF file's tensor names in Hugging Face's terms; others as they are.
    fn rewrite(&self, _cfg: &Config, _plan: &ModelPlan, name: &str, t: Array) -> Result<Vec<(String, Array)>> {
        Ok(vec![(plugin_api::gguf::hf_name(name, &[]), t)])
    }

    fn catalog(&self) -> Vec<ModelInfo> {
        vec![ModelInfo::text("cohere")
            .examples(&["CohereLabs/c4ai-command-r-v01", "CohereLabs/c4ai-command-r-plus-08-2024"])
            .gguf("command-r")]
    }

    fn plan(&self, cfg: &Config, config: &Value) -> Result<ModelPlan> {
        let caches = vec![CacheKind::Full; cfg.num_hidden_layers as usize];
        let context = context_length(cfg.max_position_embeddings.unwrap_or(0), &RopeScaling::None);
        Ok(ModelPlan::text("cohere", "cohere", cfg, caches, cfg.vocab_size, cfg.hidden_size)?
            .with_eos(eos_ids(config))
            .with_context(context)
            .with_dtype(&field_or::<String>(config, "torch_dtype", "bfloat16".into())?)
            .with_head_dims(&[implied_head_dim(cfg.hidden_size, cfg.num_attention_heads)?]))
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
        let (h, eps) = (cfg.hidden_size, cfg.layer_norm_eps);
        let (hq, hkv) = (cfg.num_attention_heads, cfg.kv_heads());
        let head_dim = implied_head_dim(h, hq)?;
        let norm = NormKind::Layer { bias: cfg.layer_norm_bias };
        // Interleaved pairs, plain base: mlx-lm reads no rope scaling here.
        let rope = Rope::new(head_dim, cfg.rope_theta, true, &RopeScaling::None)?;
        let attention = AttentionShape::new(h, hq, hkv, head_dim).biases(cfg.attention_bias, cfg.attention_bias);
        let layout = BlockLayout { pre_ffn: None, parallel: true, ..BlockLayout::pre_norm(norm, eps) };
        // The head is always the embedding, whatever `tie_word_embeddings` says.
        let mut spec = DecoderSpec::new(cfg.vocab_size, h, cfg.num_hidden_layers, true, norm, eps);
        spec.logits = LogitOps { scale: Some(cfg.logit_scale), ..LogitOps::default() };
        let lm = DecoderLm::build(w, &spec, |_, p| {
            let mlp = GatedMlp::load_with(w, &format!("{p}.mlp"), h, cfg.intermediate_size, GluActivation::Silu)?;
            DecoderBlock::load(w, p, &layout, &attention, rope.clone(), Box::new(mlp))
        })?;
        let first = lm.stage.as_ref().map_or(0, |s| s.layers.start);
        let qk_norm = cfg.use_qk_norm
            || cfg.qk_norm_from_weights && w.get(&format!("model.layers.{first}.self_attn.q_norm.weight")).is_some();
        if !qk_norm {
            return Ok(Box::new(lm));
        }
        let norms = (first..)
            .zip(&lm.blocks)
            .map(|(i, b)| HeadLayerNorms::load(w, &format!("model.layers.{i}.self_attn"), &attention, &b.attn, eps))
            .collect::<Result<Vec<_>>>()?;
        Ok(Box::new(CohereLm { lm, norms }))
    }
}

/// Command R+'s q/k norms of one layer: each head's features layer-normed
/// with no scale or bias, then scaled per head and feature.
#[derive(Debug)]
struct HeadLayerNorms {
    /// `[heads, head_dim]`
    q: Array,
    /// `[kv_heads, head_dim]`
    k: Array,
    eps: f32,
}

impl HeadLayerNorms {
    /// Loads `{prefix}.q_norm.weight` and `{prefix}.k_norm.weight` (of
    /// `shape`'s heads), keeping the rows of the heads `attn` holds: under
    /// a tensor split, this rank's share, as [`Attention::load`] splits them.
    fn load(w: &dyn Weights, prefix: &str, shape: &AttentionShape, attn: &Attention, eps: f32) -> Result<Self> {
        let (hq, hkv, d) = (shape.n_heads, shape.n_kv_heads, shape.head_dim);
        let t = |n: &str, h: i32| w.tensor(&format!("{prefix}.{n}.weight"), &[h, d], Kind::Float);
        let (q, k) = (t("q_norm", hq)?, t("k_norm", hkv)?);
        if attn.n_heads == hq && attn.n_kv_heads == hkv {
            return Ok(HeadLayerNorms { q, k, eps });
        }
        let group = w.quant(&format!("{prefix}.o_proj")).map(|q| q.group_size);
        let share = Parallel::tensor(w.parallel())
            .and_then(|p| HeadShare::split(&p, hq, hkv, d, group))
            .filter(|s| s.q.1 - s.q.0 == attn.n_heads && s.kv.1 - s.kv.0 == attn.n_kv_heads)
            .ok_or_else(|| Error::msg(format!("cohere: {prefix}: its q/k norms do not match the heads it holds")))?;
        let ((qa, qb), (ka, kb)) = (share.q, share.kv);
        Ok(HeadLayerNorms { q: q.slice_axis(0, qa, qb)?, k: k.slice_axis(0, ka, kb)?, eps })
    }

    /// `x` (`[B, L, h, d]`) normed per head.
    fn apply(&self, x: &Array, scale: &Array) -> Result<Array> {
        scale.mul(&layer_norm(x, None, None, self.eps)?)
    }
}

/// Attention of `attn` over cache `slot` with `norms` on queries and keys
/// (between the projections and rope).
fn attend_normed(
    attn: &Attention,
    norms: &HeadLayerNorms,
    x: &Array,
    caches: &mut Caches<'_>,
    slot: usize,
) -> Result<Array> {
    let (b, l) = (x.dim(0), x.dim(1));
    let (hq, hkv, d) = (attn.n_heads, attn.n_kv_heads, attn.head_dim);
    let (q, k, v) = match &attn.proj {
        Qkv::Fused(p) => {
            let mut parts = p.forward(x)?.split_at(&[hq * d, (hq + hkv) * d], -1)?;
            let v = parts.pop().expect("3 parts");
            let k = parts.pop().expect("3 parts");
            (parts.pop().expect("3 parts"), k, v)
        }
        Qkv::Split { q, k: Some(k), v: Some(v) } => (q.forward(x)?, k.forward(x)?, v.forward(x)?),
        Qkv::Split { .. } => return Err(Error::msg("cohere: attention without k/v projections")),
    };
    let heads = |t: &Array, h: i32| t.reshape(&[b, l, h, d]);
    let pos = caches.position(slot)?;
    let q = norms.apply(&heads(&q, hq)?, &norms.q)?.transpose(&[0, 2, 1, 3])?;
    let k = norms.apply(&heads(&k, hkv)?, &norms.k)?.transpose(&[0, 2, 1, 3])?;
    let v = heads(&v, hkv)?.transpose(&[0, 2, 1, 3])?;
    let (q, k) = (attn.rope.forward(&q, pos.rope())?, attn.rope.forward(&k, pos.rope())?);
    let o = caches.attend(slot, q, k, v, AttnOptions::causal(attn.scale))?;
    attn.o.forward(&o.transpose(&[0, 2, 1, 3])?.reshape(&[b, l, -1])?)
}

/// Command R+: the shared decoder's parts, its blocks run here so the q/k
/// norms sit between projection and rope.
#[derive(Debug)]
struct CohereLm {
    lm: DecoderLm,
    /// per block of `lm`
    norms: Vec<HeadLayerNorms>,
}

impl Model for CohereLm {
    fn forward(&mut self, input: &Input, caches: &mut Caches<'_>) -> Result<Output> {
        let lm = &self.lm;
        let stage = lm.stage.as_ref();
        let mut h = lm.enter(input)?;
        let first = stage.map_or(0, |s| s.layers.start);
        for (i, (block, norms)) in lm.blocks.iter().zip(&self.norms).enumerate() {
            let n = match &block.norms.pre_attn {
                Some(norm) => norm.forward(&h)?,
                None => h.clone(),
            };
            let a = attend_normed(&block.attn, norms, &n, caches, first + i)?;
            h = a.add(&block.ffn.forward(&n)?)?.add(&h)?;
        }
        let h = lm.norm.forward(&Stage::leave(stage, h, input)?)?;
        lm_output(h, input.logits, input.want_hidden, |x| lm.logits.apply(lm.head.forward(x)?))
    }
}
