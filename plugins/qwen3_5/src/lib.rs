//! The qwen3_5 family (Qwen3.5 / 3.6 text models, dense and MoE): a hybrid of
//! gated-delta-net linear attention (recurrent cache slots) and gated
//! full attention with partial rope (KV cache slots); config, weight-name
//! rules and registration.
//!
//! Weights are held under mlx-lm's names (`language_model.model.*`,
//! `language_model.lm_head.weight`), so per-tensor quantization overrides
//! of converted checkpoints match. Hugging Face checkpoints
//! (`model.language_model.*`, or `model.*` for text-only ones) are renamed,
//! their conv weights moved to MLX's layout and their zero-centred RMSNorm
//! weights shifted by one; vision-tower tensors are dropped. The
//! multi-token-prediction head (`mtp.*`) is kept under `language_model.mtp.*`
//! and becomes the family's speculative-decoding drafter ([`mtp`]).

pub mod gdn;
pub mod moe;
pub mod mtp;
pub mod scan_kernel;

use gdn::{GatedDeltaNet, GdnDims};
use mlx::fast::RopeOffset;
use mlx::nn::{Embedding, GatedMlp, Linear, RmsNorm, Rope, Weights};
use mlx::{Array, Error, Result};
use moe::SparseMoe;
use plugin_api::config::{at_most, divides, implied_head_dim, in_range, limits, one_of, positive_finite};
use plugin_api::family::{Caches, DraftForward, FamilySpec, Input, ModelForward, Output};
use plugin_api::layers::{eos_ids, field, field_or, lm_output, rope_scaling};
use plugin_api::{AttnOptions, CacheKind, ModelPlan, QuantClass, QuantSpec};
use serde_json::{json, Value};

/// MoE settings.
#[derive(Debug, Clone)]
pub struct MoeConfig {
    /// routed experts
    pub num_experts: i32,
    /// experts per token
    pub top_k: i32,
    /// renormalise the top-k probabilities
    pub norm_topk_prob: bool,
    /// every n-th layer is sparse
    pub decoder_sparse_step: i32,
    /// layers that keep a dense MLP
    pub mlp_only_layers: Vec<i32>,
    /// width of each routed expert's MLP
    pub intermediate: i32,
    /// width of the shared expert's MLP
    pub shared_intermediate: i32,
}

/// The parsed text config.
#[derive(Debug, Clone)]
pub struct Config {
    pub hidden_size: i32,
    /// Width of the dense MLPs (absent in MoE configs whose layers are all sparse).
    pub intermediate_size: Option<i32>,
    pub num_hidden_layers: i32,
    pub num_attention_heads: i32,
    pub num_key_value_heads: i32,
    pub head_dim: i32,
    pub rms_norm_eps: f32,
    pub vocab_size: i32,
    pub rope_theta: f32,
    /// Rotated features per head (`head_dim * partial_rotary_factor`).
    pub rope_dims: i32,
    pub rope_scaling: mlx::nn::RopeScaling,
    pub tie_word_embeddings: bool,
    pub max_position_embeddings: i32,
    /// Per layer: true for linear attention (gated delta net).
    pub linear: Vec<bool>,
    pub gdn: GdnDims,
    pub moe: Option<MoeConfig>,
    /// Decoder layers of the MTP head (`mtp_num_hidden_layers`, default 1;
    /// only read when the checkpoint carries MTP weights).
    pub mtp_layers: i32,
}

/// The text part of a config: `text_config` when present, else the whole config.
fn text_config(c: &Value) -> &Value {
    c.get("text_config").filter(|t| t.is_object()).unwrap_or(c)
}

impl Config {
    /// From config.json (top level with or without `text_config`).
    pub fn parse(top: &Value) -> Result<Config> {
        let c = text_config(top);
        let hidden: i32 = field(c, "hidden_size")?;
        let heads: i32 = field(c, "num_attention_heads")?;
        let n_layers: i32 = field(c, "num_hidden_layers")?;
        // Checked before it sizes anything (layer_types, the plan's caches).
        in_range("num_hidden_layers", n_layers, limits::LAYERS)?;
        one_of("hidden_act", c.get("hidden_act").and_then(Value::as_str), &["silu", "swish"])?;
        let head_dim: i32 = match c.get("head_dim").filter(|v| !v.is_null()) {
            Some(_) => field(c, "head_dim")?,
            None => implied_head_dim(hidden, heads)?,
        };
        // Rope settings live in `rope_parameters` (new configs) or at the top level.
        let rp = c.get("rope_parameters").filter(|v| v.is_object()).cloned().unwrap_or(Value::Null);
        let getf = |k: &str, d: f64| -> f64 { rp.get(k).or_else(|| c.get(k)).and_then(Value::as_f64).unwrap_or(d) };
        let partial = getf("partial_rotary_factor", 0.25);
        if !(partial > 0.0 && partial <= 1.0) {
            return Err(Error(format!("config: field `partial_rotary_factor` is {partial}, must be in (0, 1]")));
        }
        let scaling = if rp.is_object() { rope_scaling(&json!({ "rope_scaling": rp }))? } else { rope_scaling(c)? };
        let interval: i32 = field_or(c, "full_attention_interval", 4)?;
        in_range("full_attention_interval", interval, limits::LAYERS)?;
        let linear: Vec<bool> = match c.get("layer_types").and_then(Value::as_array) {
            Some(types) => {
                if types.len() != n_layers as usize {
                    return Err(Error(format!(
                        "config: layer_types has {} entries for {n_layers} layers",
                        types.len()
                    )));
                }
                types
                    .iter()
                    .map(|t| match t.as_str() {
                        Some("linear_attention") => Ok(true),
                        Some("full_attention") => Ok(false),
                        other => Err(Error(format!("config: unsupported layer type {other:?}"))),
                    })
                    .collect::<Result<_>>()?
            }
            None => (0..n_layers).map(|i| (i + 1) % interval.max(1) != 0).collect(),
        };
        let num_experts: i32 = field_or(c, "num_experts", 0)?;
        let moe = if num_experts > 0 {
            Some(MoeConfig {
                num_experts,
                top_k: field(c, "num_experts_per_tok")?,
                norm_topk_prob: field_or(c, "norm_topk_prob", true)?,
                decoder_sparse_step: field_or(c, "decoder_sparse_step", 1)?,
                mlp_only_layers: field_or(c, "mlp_only_layers", Vec::new())?,
                intermediate: field(c, "moe_intermediate_size")?,
                shared_intermediate: field(c, "shared_expert_intermediate_size")?,
            })
        } else {
            None
        };
        let tie = match c.get("tie_word_embeddings").or_else(|| top.get("tie_word_embeddings")) {
            Some(v) => v.as_bool().unwrap_or(false),
            None => false,
        };
        let cfg = Config {
            hidden_size: hidden,
            intermediate_size: field_or(c, "intermediate_size", None)?,
            num_hidden_layers: n_layers,
            num_attention_heads: heads,
            num_key_value_heads: field_or(c, "num_key_value_heads", heads)?,
            head_dim,
            rms_norm_eps: field_or(c, "rms_norm_eps", 1e-6)?,
            vocab_size: field(c, "vocab_size")?,
            rope_theta: getf("rope_theta", 100_000.0) as f32,
            rope_dims: (head_dim as f64 * partial) as i32,
            rope_scaling: scaling,
            tie_word_embeddings: tie,
            max_position_embeddings: field_or(c, "max_position_embeddings", 0)?,
            linear,
            gdn: GdnDims {
                k_heads: field(c, "linear_num_key_heads")?,
                v_heads: field(c, "linear_num_value_heads")?,
                k_dim: field(c, "linear_key_head_dim")?,
                v_dim: field(c, "linear_value_head_dim")?,
                conv_kernel: field_or(c, "linear_conv_kernel_dim", 4)?,
            },
            moe,
            mtp_layers: field_or(c, "mtp_num_hidden_layers", 1)?,
        };
        cfg.check()?;
        Ok(cfg)
    }

    /// Every field in range, naming the field otherwise.
    fn check(&self) -> Result<()> {
        in_range("hidden_size", self.hidden_size, limits::HIDDEN)?;
        if let Some(i) = self.intermediate_size {
            in_range("intermediate_size", i, limits::INTERMEDIATE)?;
        }
        in_range("num_attention_heads", self.num_attention_heads, limits::HEADS)?;
        in_range("num_key_value_heads", self.num_key_value_heads, limits::HEADS)?;
        divides("num_key_value_heads", self.num_key_value_heads, "num_attention_heads", self.num_attention_heads)?;
        in_range("head_dim", self.head_dim, limits::HEAD_DIM)?;
        in_range("vocab_size", self.vocab_size, limits::VOCAB)?;
        positive_finite("rope_theta", self.rope_theta)?;
        positive_finite("rms_norm_eps", self.rms_norm_eps)?;
        if self.rope_dims < 2 || self.rope_dims % 2 != 0 {
            return Err(Error(format!(
                "config: head_dim {} times partial_rotary_factor gives {} rotated features, which must be even and at least 2",
                self.head_dim, self.rope_dims
            )));
        }
        let g = &self.gdn;
        in_range("linear_num_key_heads", g.k_heads, limits::HEADS)?;
        in_range("linear_num_value_heads", g.v_heads, limits::HEADS)?;
        divides("linear_num_key_heads", g.k_heads, "linear_num_value_heads", g.v_heads)?;
        in_range("linear_key_head_dim", g.k_dim, limits::HEAD_DIM)?;
        in_range("linear_value_head_dim", g.v_dim, limits::HEAD_DIM)?;
        in_range("linear_conv_kernel_dim", g.conv_kernel, 64)?;
        at_most("mtp_num_hidden_layers", self.mtp_layers, limits::LAYERS)?;
        if let Some(m) = &self.moe {
            in_range("num_experts", m.num_experts, limits::EXPERTS)?;
            in_range("num_experts_per_tok", m.top_k, m.num_experts)?;
            in_range("moe_intermediate_size", m.intermediate, limits::INTERMEDIATE)?;
            in_range("shared_expert_intermediate_size", m.shared_intermediate, limits::INTERMEDIATE)?;
            in_range("decoder_sparse_step", m.decoder_sparse_step, limits::LAYERS)?;
        }
        Ok(())
    }

    fn is_sparse(&self, layer: i32) -> bool {
        match &self.moe {
            Some(m) => !m.mlp_only_layers.contains(&layer) && (layer + 1) % m.decoder_sparse_step.max(1) == 0,
            None => false,
        }
    }
}

/// Gated full attention: q projection carries a per-head output gate, q/k RMS
/// norms, rope over the first `rope_dims` features.
#[derive(Debug, Clone)]
pub struct GatedAttention {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    q_norm: RmsNorm,
    k_norm: RmsNorm,
    n_heads: i32,
    n_kv_heads: i32,
    head_dim: i32,
    rope: Rope,
}

impl GatedAttention {
    /// Loads `{prefix}.{q,k,v,o}_proj` and `{prefix}.{q,k}_norm`.
    pub fn load(w: &dyn Weights, prefix: &str, cfg: &Config, rope: Rope) -> Result<Self> {
        let l = |n: &str, i: i32, o: i32| Linear::load(w, &format!("{prefix}.{n}"), i, o);
        let (eps, h, d) = (cfg.rms_norm_eps, cfg.hidden_size, cfg.head_dim);
        let (hq, hkv) = (cfg.num_attention_heads, cfg.num_key_value_heads);
        Ok(GatedAttention {
            // Each query head carries its output gate: 2·d rows per head.
            q: l("q_proj", h, hq * 2 * d)?,
            k: l("k_proj", h, hkv * d)?,
            v: l("v_proj", h, hkv * d)?,
            o: l("o_proj", hq * d, h)?,
            q_norm: RmsNorm::load(w, &format!("{prefix}.q_norm"), d, eps)?,
            k_norm: RmsNorm::load(w, &format!("{prefix}.k_norm"), d, eps)?,
            n_heads: cfg.num_attention_heads,
            n_kv_heads: cfg.num_key_value_heads,
            head_dim: cfg.head_dim,
            rope,
        })
    }

    /// `x` is `[B, L, hidden]`; attends through KV cache `slot`.
    pub fn forward(&self, x: &Array, caches: &mut Caches<'_>, slot: usize) -> Result<Array> {
        let (b, l) = (x.dim(0), x.dim(1));
        let hd = self.head_dim;
        let qg = self.q.forward(x)?.reshape(&[b, l, self.n_heads, 2 * hd])?;
        let parts = qg.split_at(&[hd], -1)?;
        let gate = parts[1].reshape(&[b, l, -1])?;
        let q = self.q_norm.forward(&parts[0])?.transpose(&[0, 2, 1, 3])?;
        let k = self.k.forward(x)?.reshape(&[b, l, self.n_kv_heads, hd])?;
        let k = self.k_norm.forward(&k)?.transpose(&[0, 2, 1, 3])?;
        let v = self.v.forward(x)?.reshape(&[b, l, self.n_kv_heads, hd])?.transpose(&[0, 2, 1, 3])?;
        let off = caches.offset(slot)? as i32;
        let q = self.rope.forward(&q, RopeOffset::Int(off))?;
        let k = self.rope.forward(&k, RopeOffset::Int(off))?;
        let o = caches.attend(slot, q, k, v, AttnOptions::causal((hd as f32).powf(-0.5)))?;
        let o = o.transpose(&[0, 2, 1, 3])?.reshape(&[b, l, -1])?;
        self.o.forward(&o.mul(&gate.sigmoid()?)?)
    }
}

/// A layer's token mixer.
#[derive(Debug, Clone)]
pub enum Mixer {
    /// Gated delta net (recurrent cache slot).
    Linear(Box<GatedDeltaNet>),
    /// Gated full attention (KV cache slot).
    Full(Box<GatedAttention>),
}

/// A layer's channel mixer.
#[derive(Debug, Clone)]
pub enum Mlp {
    /// SwiGLU MLP.
    Dense(Box<GatedMlp>),
    /// Routed experts + shared expert.
    Sparse(Box<SparseMoe>),
}

/// One pre-norm decoder layer.
#[derive(Debug, Clone)]
pub struct Layer {
    /// token mixer
    pub mixer: Mixer,
    /// channel mixer
    pub mlp: Mlp,
    input_norm: RmsNorm,
    post_norm: RmsNorm,
}

impl Layer {
    /// Loads the layer under `p` (`{p}.linear_attn` or `{p}.self_attn`,
    /// `{p}.mlp`, the two norms): linear attention or gated full attention,
    /// a sparse MoE block or a dense MLP.
    pub fn load(w: &dyn Weights, p: &str, cfg: &Config, linear: bool, sparse: bool, rope: &Rope) -> Result<Self> {
        let (eps, h) = (cfg.rms_norm_eps, cfg.hidden_size);
        let mixer = if linear {
            Mixer::Linear(Box::new(GatedDeltaNet::load(w, &format!("{p}.linear_attn"), h, cfg.gdn, eps)?))
        } else {
            Mixer::Full(Box::new(GatedAttention::load(w, &format!("{p}.self_attn"), cfg, rope.clone())?))
        };
        let mlp = match &cfg.moe {
            Some(m) if sparse => Mlp::Sparse(Box::new(SparseMoe::load(w, &format!("{p}.mlp"), h, m)?)),
            _ => {
                let inter = cfg
                    .intermediate_size
                    .ok_or_else(|| Error(format!("config: missing field `intermediate_size` ({p} has a dense MLP)")))?;
                Mlp::Dense(Box::new(GatedMlp::load(w, &format!("{p}.mlp"), h, inter)?))
            }
        };
        Ok(Layer {
            mixer,
            mlp,
            input_norm: RmsNorm::load(w, &format!("{p}.input_layernorm"), h, eps)?,
            post_norm: RmsNorm::load(w, &format!("{p}.post_attention_layernorm"), h, eps)?,
        })
    }

    fn forward(&self, x: &Array, caches: &mut Caches<'_>, slot: usize) -> Result<Array> {
        let n = self.input_norm.forward(x)?;
        let r = match &self.mixer {
            Mixer::Linear(g) => g.forward(&n, caches, slot)?,
            Mixer::Full(a) => a.forward(&n, caches, slot)?,
        };
        let h = x.add(&r)?;
        let n = self.post_norm.forward(&h)?;
        let m = match &self.mlp {
            Mlp::Dense(m) => m.forward(&n)?,
            Mlp::Sparse(m) => m.forward(&n)?,
        };
        h.add(&m)
    }
}

/// The Qwen3.5 text model.
#[derive(Debug, Clone)]
pub struct Qwen3_5 {
    embed: Embedding,
    /// decoder layers, one cache slot each
    pub layers: Vec<Layer>,
    norm: RmsNorm,
    lm_head: Option<Linear>,
}

impl Qwen3_5 {
    /// Builds the model from weights under mlx-lm's names.
    pub fn load(cfg: &Config, w: &dyn Weights) -> Result<Self> {
        let rope = Rope::new(cfg.rope_dims, cfg.rope_theta, false, &cfg.rope_scaling)?;
        let eps = cfg.rms_norm_eps;
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| {
                let p = format!("{PREFIX}layers.{i}");
                Layer::load(w, &p, cfg, cfg.linear[i as usize], cfg.is_sparse(i), &rope)
            })
            .collect::<Result<Vec<_>>>()?;
        let (h, v) = (cfg.hidden_size, cfg.vocab_size);
        Ok(Qwen3_5 {
            embed: Embedding::load(w, &format!("{PREFIX}embed_tokens"), v, h)?,
            layers,
            norm: RmsNorm::load(w, &format!("{PREFIX}norm"), h, eps)?,
            lm_head: if cfg.tie_word_embeddings {
                None
            } else {
                Some(Linear::load(w, "language_model.lm_head", h, v)?)
            },
        })
    }

    /// Sets the scan implementation of every linear-attention layer.
    pub fn set_scan_path(&mut self, path: gdn::ScanPath) {
        for l in &mut self.layers {
            if let Mixer::Linear(g) = &mut l.mixer {
                g.path = path;
            }
        }
    }
}

impl ModelForward for Qwen3_5 {
    fn forward(&mut self, input: &Input, caches: &mut Caches<'_>) -> Result<Output> {
        let mut h = match &input.embeddings {
            Some(e) => e.clone(),
            None => self.embed.forward(&input.tokens)?,
        };
        for (i, l) in self.layers.iter().enumerate() {
            h = l.forward(&h, caches, i)?;
        }
        // The hidden state returned with `want_hidden` is taken after the
        // final norm: what the MTP head (mtp.rs) is defined on.
        let h = self.norm.forward(&h)?;
        lm_output(h, input.logits, input.want_hidden, |x| match &self.lm_head {
            Some(l) => l.forward(x),
            None => self.embed.as_linear(x),
        })
    }
}

/// Where the text model's tensors live (mlx-lm's naming).
pub const PREFIX: &str = "language_model.model.";

/// RMSNorm weights that Hugging Face Qwen3.5 checkpoints store zero-centred
/// (the model multiplies by `1 + w`); the gated norm of the delta net is not one.
const OFFSET_NORMS: [&str; 8] = [
    ".input_layernorm.weight",
    ".post_attention_layernorm.weight",
    ".q_norm.weight",
    ".k_norm.weight",
    "model.norm.weight",
    "mtp.norm.weight",
    "mtp.pre_fc_norm_embedding.weight",
    "mtp.pre_fc_norm_hidden.weight",
];

/// Maps a checkpoint name to mlx-lm's; `None` drops it. The flag says the
/// tensor came in Hugging Face form.
fn canonical_name(name: &str) -> Option<(String, bool)> {
    if name.starts_with("model.visual") || name.starts_with("vision_tower") || name.starts_with("visual.") {
        return None;
    }
    // The multi-token-prediction head: Hugging Face keeps it at the top
    // level (zero-centred norms); a converted checkpoint already holds it
    // under our name (norms shifted).
    if let Some(rest) = name.strip_prefix("mtp.") {
        return Some((format!("{}{rest}", mtp::MTP_PREFIX), true));
    }
    if name.starts_with("language_model.") {
        return Some((name.to_string(), false));
    }
    if let Some(rest) = name.strip_prefix("model.language_model.") {
        return Some((format!("{PREFIX}{rest}"), true));
    }
    if name == "lm_head.weight" || name.starts_with("lm_head.") {
        return Some((format!("language_model.{name}"), true));
    }
    if let Some(rest) = name.strip_prefix("model.") {
        return Some((format!("{PREFIX}{rest}"), true));
    }
    None
}

/// The parsed config a plan carries.
fn plan_config(plan: &ModelPlan) -> Result<Config> {
    let c: Value = serde_json::from_str(plan.config.as_str()).map_err(|e| Error(format!("plan config: {e}")))?;
    Config::parse(&c)
}

/// The family registration.
pub struct Qwen3_5Family;

impl FamilySpec for Qwen3_5Family {
    fn name(&self) -> &'static str {
        "qwen3_5"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"]
    }

    fn plan(&self, config: &Value) -> Result<ModelPlan> {
        let cfg = Config::parse(config)?;
        let mut stored = config.clone();
        if let Some(o) = stored.as_object_mut() {
            o.retain(|k, _| !k.starts_with("quantization") && k != "vision_config");
        }
        let text = text_config(config);
        let mut eos = eos_ids(config);
        if eos.is_empty() {
            eos = eos_ids(text);
        }
        let dtype = field_or::<Option<String>>(config, "torch_dtype", None)?
            .or(field_or::<Option<String>>(text, "dtype", None)?)
            .unwrap_or_else(|| "bfloat16".into());
        Ok(ModelPlan {
            family: "qwen3_5".into(),
            model_type: field_or::<String>(config, "model_type", "qwen3_5".into())?.into(),
            config: stored.to_string().into(),
            caches: cfg
                .linear
                .iter()
                .map(|&lin| if lin { CacheKind::Recurrent { arrays: 2 } } else { CacheKind::Full })
                .collect(),
            eos_ids: eos.into(),
            vocab_size: cfg.vocab_size as u32,
            hidden_size: cfg.hidden_size as u32,
            max_position_embeddings: plugin_api::config::context_length(cfg.max_position_embeddings, &cfg.rope_scaling),
            modalities: vec!["text".into()].into(),
            dtype: dtype.into(),
            add_bos: abi_stable::std_types::ROption::RNone,
        })
    }

    fn rewrite(&self, plan: &ModelPlan, name: &str, t: Array) -> Result<Vec<(String, Array)>> {
        let Some((name, hf)) = canonical_name(name) else {
            return Ok(vec![]);
        };
        // Fused expert tensors of HF MoE checkpoints: [E, 2I, H] → gate and up.
        if let Some(p) = name.strip_suffix(".mlp.experts.gate_up_proj") {
            let mid = t.dim(-2) / 2;
            let parts = t.split_at(&[mid], -2)?;
            return Ok(vec![
                (format!("{p}.mlp.switch_mlp.gate_proj.weight"), parts[0].clone()),
                (format!("{p}.mlp.switch_mlp.up_proj.weight"), parts[1].clone()),
            ]);
        }
        if let Some(p) = name.strip_suffix(".mlp.experts.down_proj") {
            return Ok(vec![(format!("{p}.mlp.switch_mlp.down_proj.weight"), t)]);
        }
        if name == "language_model.lm_head.weight" {
            let c: Value =
                serde_json::from_str(plan.config.as_str()).map_err(|e| Error(format!("plan config: {e}")))?;
            if Config::parse(&c)?.tie_word_embeddings {
                return Ok(vec![]);
            }
        }
        // PyTorch conv layout [C, 1, K] → MLX's [C, K, 1].
        if name.ends_with("conv1d.weight") && t.ndim() == 3 && t.dim(-1) != 1 {
            return Ok(vec![(name, t.swapaxes(1, 2)?)]);
        }
        if hf && t.ndim() == 1 && OFFSET_NORMS.iter().any(|s| name.ends_with(s)) {
            let shifted = t.add_s(1.0)?;
            return Ok(vec![(name, shifted)]);
        }
        Ok(vec![(name, t)])
    }

    fn quant_class(&self, _plan: &ModelPlan, name: &str) -> QuantClass {
        if name.ends_with("mlp.gate.weight") || name.ends_with("shared_expert_gate.weight") {
            // Routers stay at 8 bits, as mlx-lm's converter keeps them.
            return QuantClass::Pinned(QuantSpec { group_size: 64, bits: 8, mode: "affine".into() });
        }
        let skip =
            name.contains("norm") || name.contains("conv1d") || name.ends_with("A_log") || name.ends_with("dt_bias");
        if name.ends_with(".weight") && !skip {
            QuantClass::Body
        } else {
            QuantClass::Skip
        }
    }

    /// One matmul for gate/up in the dense MLPs, the shared experts and the
    /// MTP layers (the host skips the names a checkpoint lacks).
    fn fusions(&self, plan: &ModelPlan) -> Vec<plugin_api::Fusion> {
        let Ok(cfg) = plan_config(plan) else { return Vec::new() };
        let layers = (0..cfg.num_hidden_layers).map(|i| format!("{PREFIX}layers.{i}"));
        let mtp = (0..cfg.mtp_layers).map(|i| format!("{}layers.{i}", mtp::MTP_PREFIX));
        layers
            .chain(mtp)
            .flat_map(|l| [format!("{l}.mlp"), format!("{l}.mlp.shared_expert")])
            .map(|m| plugin_api::layers::gate_up_fusion(&m))
            .collect()
    }

    fn build(&self, plan: &ModelPlan, w: &dyn Weights) -> Result<Box<dyn ModelForward>> {
        Ok(Box::new(Qwen3_5::load(&plan_config(plan)?, w)?))
    }

    /// The MTP head of the target's own checkpoint, when it carries one.
    fn build_drafter(
        &self,
        plan: &ModelPlan,
        w: &dyn Weights,
        target_plan: &ModelPlan,
        target: &dyn Weights,
    ) -> Result<Option<Box<dyn DraftForward>>> {
        // The host hands the target's own plan twice when it asks for a self-drafter.
        if !std::ptr::eq(plan, target_plan) {
            // A separate Qwen3.5 checkpoint cannot be a small-LM drafter: its
            // linear-attention state cannot be trimmed back after a rejected draft.
            return Err(Error(
                "a qwen3_5 checkpoint cannot draft for another model (its recurrent state cannot roll back); \
                 Qwen3.5 drafts with its own MTP head (drop --draft-model)"
                    .into(),
            ));
        }
        if !mtp::has_mtp(w) {
            return Ok(None);
        }
        let cfg = plan_config(plan)?;
        let tcfg = plan_config(target_plan)?;
        Ok(Some(Box::new(mtp::MtpDrafter::load(&cfg, w, &tcfg, target)?)))
    }
}

#[cfg(feature = "export")]
plugin_api::export_plugin!("famlx-plugin-qwen3_5", [Qwen3_5Family]);
