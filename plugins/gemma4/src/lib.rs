//! The gemma4 family (Gemma 4 text models): config, layers, forward,
//! weight-name rules and registration.
//!
//! Serves `gemma4` (multimodal checkpoints: the text model under
//! `text_config`, vision/audio towers dropped) and `gemma4_text`. The text
//! model has sliding-window and global attention layers with their own head
//! dims, q/k norms and a scale-free v norm (attention scale 1), proportional
//! partial rope on global layers, K=V global attention where the config asks,
//! a GeGLU MLP between four norms per layer, a per-layer output scalar,
//! embedding scaling, final-logit soft-capping and tied embeddings. The
//! E2B/E4B variants add per-layer input embeddings and KV sharing: the last
//! `num_kv_shared_layers` layers own no K/V (and no cache slot) and attend
//! over the K/V of the last earlier layer of the same type. The 26B-A4B
//! style MoE block (`enable_moe_block`) runs routed experts beside the dense
//! MLP in every layer and sums the two branches. `gemma4_assistant`
//! checkpoints are drafters for speculative decoding ([`assistant`]).

use abi_stable::std_types::ROption;
use mlx::fast::{rms_norm, scaled_dot_product_attention, Mask, RopeOffset};
use mlx::nn::{geglu, Embedding, GateUp, GluActivation, Kind, Linear, RmsNorm, Rope, RopeScaling, SwitchGlu, Weights};
use mlx::{arange, Array, Dtype, Error, Result};
use plugin_api::config::{at_most, divides, in_range, limits, one_of, positive_finite, DecoderFields};
use plugin_api::family::{Caches, DraftForward, FamilySpec, Input, ModelForward, Output};
use plugin_api::layers::{eos_ids, field, field_or, lm_output, rope_one_token, HeadNorms};
use plugin_api::{AttnMask, AttnOptions, CacheKind, ModelPlan, QuantClass, QuantSpec};

pub mod assistant;
use serde_json::{json, Value};

/// Rope settings of one attention type (`rope_parameters` entry).
#[derive(Debug, Clone, PartialEq)]
pub struct RopeParams {
    /// Base θ.
    pub theta: f32,
    /// `default` or `proportional`.
    pub kind: String,
    /// Fraction of the head dim that rotates (`proportional` only).
    pub partial_rotary_factor: f32,
    /// Frequency factor (`proportional` only).
    pub factor: f32,
}

impl RopeParams {
    fn parse(v: Option<&Value>) -> Result<RopeParams> {
        let empty = json!({});
        let v = v.filter(|v| !v.is_null()).unwrap_or(&empty);
        Ok(RopeParams {
            theta: field_or(v, "rope_theta", 10000.0)?,
            kind: field_or::<String>(v, "rope_type", "default".into())
                .or_else(|_| field_or::<String>(v, "type", "default".into()))?,
            partial_rotary_factor: field_or(v, "partial_rotary_factor", 1.0)?,
            factor: field_or(v, "factor", 1.0)?,
        })
    }

    /// The rope over a head of `dims` features.
    pub fn rope(&self, dims: i32, traditional: bool) -> Result<Rope> {
        match self.kind.as_str() {
            "default" => Rope::new(dims, self.theta, traditional, &RopeScaling::None),
            "linear" => Rope::new(dims, self.theta, traditional, &RopeScaling::Linear { factor: self.factor }),
            "proportional" => {
                // The first `rotated` features rotate with periods θ^(2i/dims)
                // (exponents over the whole head); the rest get infinite
                // periods, i.e. stay put.
                let rotated = (dims as f32 * self.partial_rotary_factor) as i32;
                if rotated > dims {
                    return Err(Error::msg("rope: partial_rotary_factor > 1"));
                }
                let mut f: Vec<f32> =
                    (0..rotated / 2).map(|i| self.factor * self.theta.powf((2 * i) as f32 / dims as f32)).collect();
                f.extend(std::iter::repeat_n(f32::INFINITY, ((dims - rotated) / 2) as usize));
                Ok(Rope::with_freqs(dims, traditional, Array::from_slice(&f, &[f.len() as i32])?))
            }
            other => Err(Error(format!("config: rope_type `{other}` is not supported by gemma4"))),
        }
    }
}

/// The parsed text config (mlx-lm's defaults where a field is absent).
#[derive(Debug, Clone)]
pub struct Config {
    /// Checkpoint `model_type` (`gemma4` or `gemma4_text`).
    pub model_type: String,
    /// Residual width.
    pub hidden_size: i32,
    /// Decoder layers.
    pub num_hidden_layers: i32,
    /// MLP width (doubled on KV-shared layers with `use_double_wide_mlp`).
    pub intermediate_size: i32,
    /// Query heads.
    pub num_attention_heads: i32,
    /// Key/value heads.
    pub num_key_value_heads: i32,
    /// Key/value heads of K=V global layers, when different.
    pub num_global_key_value_heads: Option<i32>,
    /// Head dim of sliding layers.
    pub head_dim: i32,
    /// Head dim of global layers (0: `head_dim`).
    pub global_head_dim: i32,
    /// RMS norm epsilon.
    pub rms_norm_eps: f32,
    /// Vocabulary.
    pub vocab_size: i32,
    /// Vocabulary of the per-layer input embeddings.
    pub vocab_size_per_layer_input: i32,
    /// Width of each layer's input embedding (0: none).
    pub hidden_size_per_layer_input: i32,
    /// Trailing layers that reuse earlier layers' K/V.
    pub num_kv_shared_layers: i32,
    /// Window of sliding layers.
    pub sliding_window: i32,
    /// Per layer: true for global (full) attention.
    pub full: Vec<bool>,
    /// Rope of global layers.
    pub rope_full: RopeParams,
    /// Rope of sliding layers.
    pub rope_sliding: RopeParams,
    /// Traditional (interleaved) rope.
    pub rope_traditional: bool,
    /// Global layers use keys as values (no v_proj).
    pub attention_k_eq_v: bool,
    /// `tanh(x / c) * c` on the logits.
    pub final_logit_softcapping: Option<f32>,
    /// Doubled MLP on KV-shared layers.
    pub use_double_wide_mlp: bool,
    /// Mixture-of-experts block beside the dense MLP.
    pub enable_moe_block: bool,
    /// Routed experts (MoE only).
    pub num_experts: i32,
    /// Experts per token (MoE only).
    pub top_k_experts: i32,
    /// Width of each expert's MLP (MoE only).
    pub moe_intermediate_size: i32,
    /// Output head tied to the embedding.
    pub tie_word_embeddings: bool,
    /// Trained context.
    pub max_position_embeddings: i32,
}

/// The text part of a config: `text_config` when present, else the config.
fn text_part(c: &Value) -> &Value {
    c.get("text_config").filter(|t| t.is_object()).unwrap_or(c)
}

impl Config {
    /// From config.json (multimodal `gemma4` or `gemma4_text`).
    pub fn parse(c: &Value) -> Result<Config> {
        let model_type: String = field_or(c, "model_type", "gemma4_text".to_string())?;
        let t = text_part(c);
        let n: i32 = field(t, "num_hidden_layers")?;
        // Checked before it sizes anything (layer_types, the plan's caches).
        in_range("num_hidden_layers", n, limits::LAYERS)?;
        let act = t.get("hidden_activation").or_else(|| t.get("hidden_act")).and_then(Value::as_str);
        // mlx-lm runs the tanh approximation of GELU for every GELU name.
        one_of("hidden_activation", act, &["gelu_pytorch_tanh", "gelu_new", "gelu_fast", "gelu"])?;
        // mlx-lm's gemma4 wrapper takes the vocabulary from the top level.
        let vocab: i32 = match c.get("vocab_size").filter(|_| !std::ptr::eq(t, c)) {
            Some(v) if !v.is_null() => field(c, "vocab_size")?,
            _ => field_or(t, "vocab_size", 262144)?,
        };
        let full = match t.get("layer_types").filter(|v| !v.is_null()) {
            Some(_) => field::<Vec<String>>(t, "layer_types")?
                .iter()
                .map(|s| match s.as_str() {
                    "full_attention" => Ok(true),
                    "sliding_attention" => Ok(false),
                    other => Err(Error(format!("config: layer_types: unsupported layer type {other:?}"))),
                })
                .collect::<Result<Vec<bool>>>()?,
            None => {
                let p: i32 = field_or(t, "sliding_window_pattern", 5)?;
                (0..n).map(|i| (i % p.max(1)) == p - 1).collect::<Vec<bool>>()
            }
        };
        if full.len() != n as usize {
            return Err(Error(format!("config: layer_types has {} entries for {n} layers", full.len())));
        }
        let rp = t.get("rope_parameters").filter(|v| !v.is_null());
        let (rope_full, rope_sliding) = match rp {
            Some(r) => (RopeParams::parse(r.get("full_attention"))?, RopeParams::parse(r.get("sliding_attention"))?),
            None => (
                RopeParams { theta: 1e6, kind: "proportional".into(), partial_rotary_factor: 0.25, factor: 1.0 },
                RopeParams { theta: 1e4, kind: "default".into(), partial_rotary_factor: 1.0, factor: 1.0 },
            ),
        };
        let cfg = Config {
            model_type,
            // The shape fields are required: a default would silently
            // describe another model than the checkpoint's.
            hidden_size: field(t, "hidden_size")?,
            num_hidden_layers: n,
            intermediate_size: field(t, "intermediate_size")?,
            num_attention_heads: field(t, "num_attention_heads")?,
            num_key_value_heads: field(t, "num_key_value_heads")?,
            num_global_key_value_heads: field_or(t, "num_global_key_value_heads", None)?,
            head_dim: field(t, "head_dim")?,
            global_head_dim: field_or(t, "global_head_dim", 512)?,
            rms_norm_eps: field_or(t, "rms_norm_eps", 1e-6)?,
            vocab_size: vocab,
            vocab_size_per_layer_input: field_or(t, "vocab_size_per_layer_input", 262144)?,
            hidden_size_per_layer_input: field_or(t, "hidden_size_per_layer_input", 256)?,
            num_kv_shared_layers: field_or(t, "num_kv_shared_layers", 20)?,
            sliding_window: field_or(t, "sliding_window", 512)?,
            full,
            rope_full,
            rope_sliding,
            rope_traditional: field_or(t, "rope_traditional", false)?,
            attention_k_eq_v: field_or(t, "attention_k_eq_v", false)?,
            final_logit_softcapping: field_or(t, "final_logit_softcapping", Some(30.0))?,
            use_double_wide_mlp: field_or(t, "use_double_wide_mlp", true)?,
            enable_moe_block: field_or(t, "enable_moe_block", false)?,
            num_experts: field_or::<Option<i32>>(t, "num_experts", None)?.unwrap_or(0),
            top_k_experts: field_or::<Option<i32>>(t, "top_k_experts", None)?.unwrap_or(0),
            moe_intermediate_size: field_or::<Option<i32>>(t, "moe_intermediate_size", None)?.unwrap_or(0),
            tie_word_embeddings: field_or(t, "tie_word_embeddings", field_or(c, "tie_word_embeddings", true)?)?,
            max_position_embeddings: field_or(t, "max_position_embeddings", 131072)?,
        };
        cfg.check()?;
        if cfg.num_kv_shared_layers < 0 || cfg.num_kv_shared_layers > n {
            return Err(Error(format!("config: num_kv_shared_layers {} out of range", cfg.num_kv_shared_layers)));
        }
        if cfg.sliding_window < 1 {
            return Err(Error::msg("config: sliding_window must be positive"));
        }
        if cfg.enable_moe_block
            && (cfg.num_experts < 1
                || cfg.top_k_experts < 1
                || cfg.top_k_experts > cfg.num_experts
                || cfg.moe_intermediate_size < 1)
        {
            return Err(Error(format!(
                "config: enable_moe_block needs num_experts >= 1, top_k_experts in 1..=num_experts and \
                 moe_intermediate_size >= 1 (got {}, {} and {})",
                cfg.num_experts, cfg.top_k_experts, cfg.moe_intermediate_size
            )));
        }
        Ok(cfg)
    }

    /// Every field in range, naming the field otherwise.
    fn check(&self) -> Result<()> {
        DecoderFields {
            hidden: self.hidden_size,
            layers: self.num_hidden_layers,
            intermediate: self.intermediate_size,
            heads: self.num_attention_heads,
            kv_heads: self.num_key_value_heads,
            head_dim: self.head_dim,
            vocab: self.vocab_size,
        }
        .check()?;
        at_most("global_head_dim", self.global_head_dim, limits::HEAD_DIM)?;
        if let Some(h) = self.num_global_key_value_heads {
            in_range("num_global_key_value_heads", h, limits::HEADS)?;
            divides("num_global_key_value_heads", h, "num_attention_heads", self.num_attention_heads)?;
        }
        at_most("hidden_size_per_layer_input", self.hidden_size_per_layer_input, limits::HIDDEN)?;
        if self.hidden_size_per_layer_input > 0 {
            in_range("vocab_size_per_layer_input", self.vocab_size_per_layer_input, limits::VOCAB)?;
        }
        positive_finite("rms_norm_eps", self.rms_norm_eps)?;
        for (which, r) in [("full_attention", &self.rope_full), ("sliding_attention", &self.rope_sliding)] {
            positive_finite(&format!("rope_parameters.{which}.rope_theta"), r.theta)?;
            if !(0.0..=1.0).contains(&r.partial_rotary_factor) {
                return Err(Error(format!(
                    "config: field `rope_parameters.{which}.partial_rotary_factor` is {}, must be in [0, 1]",
                    r.partial_rotary_factor
                )));
            }
            positive_finite(&format!("rope_parameters.{which}.factor"), r.factor)?;
        }
        if let Some(c) = self.final_logit_softcapping {
            if !c.is_finite() {
                return Err(Error(format!("config: field `final_logit_softcapping` is {c}, must be finite")));
            }
        }
        if self.enable_moe_block {
            in_range("num_experts", self.num_experts, limits::EXPERTS)?;
        }
        Ok(())
    }

    /// Index of the first layer that owns no K/V.
    pub fn first_kv_shared(&self) -> i32 {
        self.num_hidden_layers - self.num_kv_shared_layers
    }

    /// Width of layer `i`'s MLP: doubled on KV-shared layers of a model that
    /// has both kinds, with `use_double_wide_mlp`.
    pub fn mlp_width(&self, i: usize) -> i32 {
        let first = self.first_kv_shared();
        let doubled = self.use_double_wide_mlp && first > 0 && i as i32 >= first;
        self.intermediate_size * if doubled { 2 } else { 1 }
    }

    /// For each layer, the layer whose K/V it attends over (itself for
    /// layers that own K/V; the last earlier layer of the same type for
    /// KV-shared ones).
    pub fn kv_sources(&self) -> Result<Vec<usize>> {
        let m = self.first_kv_shared() as usize;
        (0..self.num_hidden_layers as usize)
            .map(|i| {
                if i < m {
                    return Ok(i);
                }
                (0..m)
                    .rev()
                    .find(|&j| self.full[j] == self.full[i])
                    .ok_or_else(|| Error(format!("config: KV-shared layer {i} has no earlier layer of its type")))
            })
            .collect()
    }

    /// The name prefix of the text model's tensors in the host's naming
    /// (mlx-lm's: `language_model.model.` for multimodal checkpoints).
    pub fn prefix(&self) -> &'static str {
        if self.model_type == "gemma4" {
            "language_model."
        } else {
            ""
        }
    }
}

/// Module prefixes of the non-text towers of multimodal checkpoints.
const MEDIA_PREFIXES: [&str; 6] =
    ["vision_tower", "multi_modal_projector", "audio_tower", "embed_audio", "embed_vision", "vision_embedder"];

/// Tensor name fragments that carry no weights a runtime needs.
const DROPPED: [&str; 5] = ["self_attn.rotary_emb", "input_max", "input_min", "output_max", "output_min"];

/// The family registration.
pub struct Gemma4Family;

impl FamilySpec for Gemma4Family {
    fn name(&self) -> &'static str {
        "gemma4"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["gemma4", "gemma4_text", assistant::MODEL_TYPE]
    }

    fn plan(&self, config: &Value) -> Result<ModelPlan> {
        if config.get("model_type").and_then(Value::as_str) == Some(assistant::MODEL_TYPE) {
            return assistant::plan(config);
        }
        let cfg = Config::parse(config)?;
        cfg.kv_sources()?;
        let mut stored = config.clone();
        if let Some(o) = stored.as_object_mut() {
            o.retain(|k, _| !k.starts_with("quantization"));
        }
        let caches =
            (0..cfg.first_kv_shared() as usize)
                .map(|i| {
                    if cfg.full[i] {
                        CacheKind::Full
                    } else {
                        CacheKind::Sliding { window: cfg.sliding_window as u32 }
                    }
                })
                .collect();
        let mut eos = eos_ids(config);
        if eos.is_empty() {
            eos = eos_ids(text_part(config));
        }
        let dtype = field_or::<Option<String>>(config, "torch_dtype", None)?
            .or(field_or::<Option<String>>(text_part(config), "torch_dtype", None)?)
            .unwrap_or_else(|| "bfloat16".into());
        Ok(ModelPlan {
            family: "gemma4".into(),
            model_type: cfg.model_type.as_str().into(),
            config: json!(stored).to_string().into(),
            caches,
            eos_ids: eos.into(),
            vocab_size: cfg.vocab_size as u32,
            hidden_size: cfg.hidden_size as u32,
            max_position_embeddings: cfg.max_position_embeddings.max(0) as u32,
            modalities: vec!["text".into()].into(),
            dtype: dtype.into(),
            // Gemma is trained with BOS first; the tokenizer adds it once.
            add_bos: abi_stable::std_types::ROption::RSome(true),
        })
    }

    fn rewrite(&self, plan: &ModelPlan, name: &str, t: Array) -> Result<Vec<(String, Array)>> {
        if plan.model_type.as_str() == assistant::MODEL_TYPE {
            return assistant::rewrite(plan, name, t);
        }
        let cfg = Config::from_plan(plan)?;
        let bare = name.strip_prefix("model.").unwrap_or(name);
        if MEDIA_PREFIXES.iter().any(|p| bare.starts_with(p)) || DROPPED.iter().any(|d| name.contains(d)) {
            return Ok(vec![]);
        }
        // Hugging Face naming (`model.language_model.X`) to mlx-lm's
        // (`language_model.model.X`); gemma4_text names stay as they are.
        let name = match name.strip_prefix("model.language_model.") {
            Some(rest) => format!("language_model.model.{rest}"),
            None => name.to_string(),
        };
        // Hugging Face keeps each layer's experts fused ([E, 2I, H] gate and
        // up stacked, [E, H, I] down); mlx-lm's naming splits them.
        if let Some(p) = name.strip_suffix(".experts.gate_up_proj") {
            let parts = t.split_at(&[t.dim(-2) / 2], -2)?;
            return Ok(vec![
                (format!("{p}.experts.switch_glu.gate_proj.weight"), parts[0].clone()),
                (format!("{p}.experts.switch_glu.up_proj.weight"), parts[1].clone()),
            ]);
        }
        if let Some(p) = name.strip_suffix(".experts.down_proj") {
            return Ok(vec![(format!("{p}.experts.switch_glu.down_proj.weight"), t)]);
        }
        // KV-shared layers own no K/V: drop projections a checkpoint may carry.
        if [".self_attn.k_proj", ".self_attn.v_proj", ".self_attn.k_norm"].iter().any(|s| name.contains(s)) {
            if let Some(i) =
                name.split("layers.").nth(1).and_then(|r| r.split('.').next()).and_then(|s| s.parse::<i32>().ok())
            {
                if i >= cfg.first_kv_shared() {
                    return Ok(vec![]);
                }
            }
        }
        Ok(vec![(name, t)])
    }

    fn quant_class(&self, _plan: &ModelPlan, name: &str) -> QuantClass {
        if name.ends_with("router.proj.weight") {
            // Routers stay at 8 bits, as mlx-lm's gemma4 quant_predicate keeps them.
            return QuantClass::Pinned(QuantSpec { group_size: 64, bits: 8, mode: "affine".into() });
        }
        if name.ends_with(".weight") && !name.contains("norm") {
            QuantClass::Body
        } else {
            QuantClass::Skip
        }
    }

    /// One matmul for gate/up in every layer's dense MLP.
    fn fusions(&self, plan: &ModelPlan) -> Vec<plugin_api::Fusion> {
        let Ok(cfg) = Config::from_plan(plan) else { return Vec::new() };
        let p = format!("{}model", cfg.prefix());
        // q/k/v fuse where a layer has all three (not in K=V or KV-shared
        // layers: the host leaves a fusion with a missing part alone).
        (0..cfg.num_hidden_layers)
            .flat_map(|i| {
                let l = format!("{p}.layers.{i}");
                [
                    plugin_api::layers::qkv_fusion(&format!("{l}.self_attn")),
                    plugin_api::layers::gate_up_fusion(&format!("{l}.mlp")),
                ]
            })
            .collect()
    }

    fn build(&self, plan: &ModelPlan, w: &dyn Weights) -> Result<Box<dyn ModelForward>> {
        if plan.model_type.as_str() == assistant::MODEL_TYPE {
            return Err(Error::msg("gemma4_assistant is a draft model: pass it with --draft-model"));
        }
        Ok(Box::new(Gemma4Text::load(&Config::from_plan(plan)?, w)?))
    }

    fn build_drafter(
        &self,
        plan: &ModelPlan,
        w: &dyn Weights,
        target_plan: &ModelPlan,
        target_w: &dyn Weights,
    ) -> Result<Option<Box<dyn DraftForward>>> {
        if plan.model_type.as_str() != assistant::MODEL_TYPE {
            return Ok(None);
        }
        Ok(Some(Box::new(assistant::Gemma4Assistant::load(plan, w, target_plan, target_w)?)))
    }
}

impl Config {
    /// Re-parses the config the plan carries.
    pub fn from_plan(plan: &ModelPlan) -> Result<Config> {
        let c: Value = serde_json::from_str(plan.config.as_str()).map_err(|e| Error(format!("plan config: {e}")))?;
        Config::parse(&c)
    }
}

/// The GeGLU MLP: `down(gelu_tanh(gate(x)) * up(x))`.
#[derive(Debug, Clone)]
pub struct GegluMlp {
    /// gate and up projections (fused at load when the host could)
    pub proj: GateUp,
    /// down projection
    pub down: Linear,
}

impl GegluMlp {
    /// Loads `{prefix}.gate_up_proj` (fused by the host) or
    /// `{prefix}.{gate,up}_proj`, and `down_proj`.
    pub fn load(w: &dyn Weights, prefix: &str, hidden: i32, intermediate: i32) -> Result<Self> {
        Ok(GegluMlp {
            proj: GateUp::load(w, prefix, hidden, intermediate)?,
            down: Linear::load(w, &format!("{prefix}.down_proj"), intermediate, hidden)?,
        })
    }
    /// Forward.
    pub fn forward(&self, x: &Array) -> Result<Array> {
        let (gate, up) = self.proj.forward(x)?;
        self.down.forward(&geglu(&gate, &up)?)
    }
}

/// The expert router: a scale-carrying RMS norm of the residual, a linear
/// score per expert, the top k by score, softmax over those k, times a
/// learned per-expert scale.
#[derive(Debug, Clone)]
struct Router {
    proj: Linear,
    /// `scale * hidden^-0.5`, the norm's weight.
    norm_weight: Array,
    per_expert_scale: Array,
    eps: f32,
    top_k: i32,
}

impl Router {
    fn load(w: &dyn Weights, prefix: &str, cfg: &Config) -> Result<Router> {
        let (h, e) = (cfg.hidden_size, cfg.num_experts);
        let scale = w.tensor(&format!("{prefix}.scale"), &[h], Kind::Float)?;
        let per_expert_scale = w.tensor(&format!("{prefix}.per_expert_scale"), &[e], Kind::Float)?;
        Ok(Router {
            proj: Linear::load(w, &format!("{prefix}.proj"), h, e)?,
            // Rounded in the weight's dtype, as mlx-lm multiplies them.
            norm_weight: scale.mul_s((cfg.hidden_size as f64).powf(-0.5))?,
            per_expert_scale,
            eps: cfg.rms_norm_eps,
            top_k: cfg.top_k_experts,
        })
    }

    /// `x` `[B, L, H]` → (expert ids `[B, L, k]` uint32, weights `[B, L, k]`).
    fn forward(&self, x: &Array) -> Result<(Array, Array)> {
        let scores = self.proj.forward(&rms_norm(x, Some(&self.norm_weight), self.eps)?)?;
        let e = scores.dim(-1);
        let idx = scores.argpartition(e - self.top_k, -1)?.slice_axis(-1, e - self.top_k, e)?;
        let weights = scores.take_along_axis(&idx, -1)?.softmax(&[-1], false)?;
        let weights = weights.mul(&self.per_expert_scale.take(&idx, 0)?)?;
        Ok((idx.astype(Dtype::U32)?, weights))
    }
}

/// The MoE branch of a layer: routed GeGLU experts between their own norms.
#[derive(Debug, Clone)]
struct MoeBlock {
    router: Router,
    experts: SwitchGlu,
    pre_norm: RmsNorm,
    /// Norm of the dense MLP's output before the sum.
    post_norm_dense: RmsNorm,
    /// Norm of the experts' output before the sum.
    post_norm_experts: RmsNorm,
}

impl MoeBlock {
    /// The experts' contribution for the residual `h` `[B, L, H]`.
    fn experts(&self, h: &Array) -> Result<Array> {
        let (idx, weights) = self.router.forward(h)?;
        let y = self.experts.forward(&self.pre_norm.forward(h)?, &idx)?; // [B, L, k, H]
        let y = y.mul(&weights.expand_dims(&[-1])?)?.sum(&[-2], false)?;
        self.post_norm_experts.forward(&y)
    }
}

/// K/V a layer attended over, kept for the KV-shared layers that read them.
#[derive(Clone)]
struct SharedKv {
    k: Array,
    v: Array,
    /// Rope offset of the queries.
    offset: i32,
    /// Sliding window of the source (None: global).
    window: Option<i32>,
}

/// The attention mask for `l` queries that end the `s` keys: causal, and
/// `window` wide when given; `None` when nothing needs masking.
fn mask_for(l: i32, s: i32, window: Option<i32>) -> Result<Option<Array>> {
    if l == 1 && window.is_none_or(|w| s <= w) {
        return Ok(None);
    }
    let qi = arange((s - l) as f64, s as f64, 1.0, Dtype::I32)?.expand_dims(&[1])?;
    let ki = arange(0.0, s as f64, 1.0, Dtype::I32)?.expand_dims(&[0])?;
    let mut m = qi.ge(&ki)?;
    if let Some(w) = window {
        m = m.logical_and(&qi.lt(&ki.add(&Array::i32(w))?)?)?;
    }
    Ok(Some(m))
}

/// The input projections of a [`Gemma4Attention`].
#[derive(Debug, Clone)]
enum Proj {
    /// `q_proj`, and `k_proj`/`v_proj` where the layer has them (no v in
    /// K=V layers, neither in KV-shared or assistant layers).
    Split { q: Linear, k: Option<Linear>, v: Option<Linear> },
    /// `qkv_proj` (fused by the host at load), with the q, k and v norms of
    /// a decoded token as one [`HeadNorms`] (v's norm has no scale).
    Fused { qkv: Linear, norms: Option<HeadNorms> },
}

/// One attention layer.
#[derive(Debug, Clone)]
pub struct Gemma4Attention {
    proj: Proj,
    o: Linear,
    q_norm: RmsNorm,
    k_norm: Option<RmsNorm>,
    eps: f32,
    n_heads: i32,
    n_kv_heads: i32,
    head_dim: i32,
    rope: Rope,
    window: Option<i32>,
}

impl Gemma4Attention {
    /// `[B, L, h·d]` → `[B, h, L, d]`, normed per head by `norm`. For one
    /// token the layouts coincide, so a reshape does it without a transpose
    /// node (decode is bound by host time per graph node).
    fn heads(&self, x: &Array, l: i32, h: i32, norm: impl FnOnce(&Array) -> Result<Array>) -> Result<Array> {
        let (b, d) = (x.dim(0), self.head_dim);
        if l == 1 {
            norm(&x.reshape(&[b, h, 1, d])?)
        } else {
            norm(&x.reshape(&[b, l, h, d])?)?.transpose(&[0, 2, 1, 3])
        }
    }

    /// The projections' outputs `[B, L, h·d]`: q, and k and v when the
    /// layer has them (v is k's output in K=V layers).
    fn project(&self, x: &Array) -> Result<(Array, Option<(Array, Array)>)> {
        match &self.proj {
            Proj::Split { q, k, v } => {
                let kv = match k {
                    Some(kp) => {
                        let k = kp.forward(x)?;
                        let v = match v {
                            Some(vp) => vp.forward(x)?,
                            None => k.clone(),
                        };
                        Some((k, v))
                    }
                    None => None,
                };
                Ok((q.forward(x)?, kv))
            }
            Proj::Fused { qkv, .. } => {
                let (hq, hkv, d) = (self.n_heads, self.n_kv_heads, self.head_dim);
                let mut p = qkv.forward(x)?.split_at(&[hq * d, (hq + hkv) * d], -1)?;
                let v = p.pop().expect("3 parts");
                let k = p.pop().expect("3 parts");
                Ok((p.pop().expect("3 parts"), Some((k, v))))
            }
        }
    }

    /// Normed queries `[B, h, L, d]`, before rope.
    fn queries(&self, q: &Array, l: i32) -> Result<Array> {
        self.heads(q, l, self.n_heads, |x| self.q_norm.forward(x))
    }

    /// `[B, h, L, d]` → `[B, L, h·d]`; for one token a reshape is enough.
    fn merge_heads(o: &Array, b: i32, l: i32) -> Result<Array> {
        if l == 1 {
            o.reshape(&[b, 1, -1])
        } else {
            o.transpose(&[0, 2, 1, 3])?.reshape(&[b, l, -1])
        }
    }

    /// Roped queries, and roped keys with normed values when the layer has
    /// them, all `[B, h, L, d]`, at position `off`.
    fn qkv(&self, x: &Array, off: i32) -> Result<(Array, Option<(Array, Array)>)> {
        let (b, l) = (x.dim(0), x.dim(1));
        let (hq, hkv) = (self.n_heads, self.n_kv_heads);
        if let Proj::Fused { qkv, norms: Some(n) } = &self.proj {
            if l == 1 && n.fits(x.dtype()) {
                // One token: every head normed at once and roped in one call
                // (v's rotated copy is dropped: v comes from the normed heads).
                let y = n.apply(&qkv.forward(x)?.reshape(&[b, hq + 2 * hkv, 1, self.head_dim])?)?;
                let (q, k) = rope_one_token(&self.rope, &y, RopeOffset::Int(off), hq, hkv)?;
                return Ok((q, Some((k, y.slice_axis(1, hq + hkv, hq + 2 * hkv)?))));
            }
        }
        let (q, kv) = self.project(x)?;
        let q = self.rope.forward(&self.queries(&q, l)?, RopeOffset::Int(off))?;
        let kv = match (kv, &self.k_norm) {
            (Some((k, v)), Some(k_norm)) => {
                let k = self.heads(&k, l, hkv, |x| k_norm.forward(x))?;
                let v = self.heads(&v, l, hkv, |x| rms_norm(x, None, self.eps))?;
                Some((self.rope.forward(&k, RopeOffset::Int(off))?, v))
            }
            _ => None,
        };
        Ok((q, kv))
    }

    /// Runs the layer. `slot` is its cache slot; `keep` asks for the K/V it
    /// attended over (for KV-shared layers); `shared` gives them to a layer
    /// that owns none.
    fn forward(
        &self,
        x: &Array,
        caches: &mut Caches<'_>,
        slot: Option<usize>,
        keep: bool,
        shared: Option<&SharedKv>,
    ) -> Result<(Array, Option<SharedKv>)> {
        let (b, l) = (x.dim(0), x.dim(1));
        let (o, kept) = match (shared, slot) {
            (Some(s), _) => {
                let (q, _) = self.project(x)?;
                let q = self.rope.forward(&self.queries(&q, l)?, RopeOffset::Int(s.offset))?;
                let m = mask_for(l, s.k.dim(2), s.window)?;
                let mask = m.as_ref().map_or(Mask::None, Mask::Array);
                (scaled_dot_product_attention(&q, &s.k, &s.v, 1.0, mask, None)?, None)
            }
            (None, Some(slot)) => {
                let off = caches.offset(slot)? as i32;
                let (q, Some((k, v))) = self.qkv(x, off)? else {
                    return Err(Error::msg("gemma4: a layer without K/V projections got no shared K/V"));
                };
                if keep {
                    // KV-shared layers read these K/V later in this call: fetch
                    // them and attend here, with the mask the cache kind implies.
                    let (k, v) = caches.update_and_fetch(slot, k, v)?;
                    let m = mask_for(l, k.dim(2), self.window)?;
                    let mask = m.as_ref().map_or(Mask::None, Mask::Array);
                    let o = scaled_dot_product_attention(&q, &k, &v, 1.0, mask, None)?;
                    (o, Some(SharedKv { k, v, offset: off, window: self.window }))
                } else {
                    (caches.attend(slot, q, k, v, AttnOptions::causal(1.0))?, None)
                }
            }
            _ => return Err(Error::msg("gemma4: a layer without K/V projections got no shared K/V")),
        };
        let o = self.o.forward(&Self::merge_heads(&o, b, l)?)?;
        Ok((o, kept))
    }
}

impl Gemma4Attention {
    /// Attends over K/V another model cached (an assistant reading the
    /// target's caches read-only): queries roped at `offset`, `mask` as the
    /// cache call takes it.
    fn forward_cached(
        &self,
        x: &Array,
        target: &Caches<'_>,
        slot: usize,
        offset: i32,
        mask: AttnMask,
    ) -> Result<Array> {
        let (b, l) = (x.dim(0), x.dim(1));
        let (q, _) = self.project(x)?;
        let q = self.rope.forward(&self.queries(&q, l)?, RopeOffset::Int(offset))?;
        let o = target.attend_cached(slot, q, AttnOptions { scale: 1.0, mask, sinks: ROption::RNone })?;
        self.o.forward(&Self::merge_heads(&o, b, l)?)
    }
}

/// Per-layer input gating of the E2B/E4B models.
#[derive(Debug, Clone)]
struct PerLayerGate {
    gate: Linear,
    proj: Linear,
    norm: RmsNorm,
}

/// One decoder layer.
#[derive(Debug, Clone)]
pub struct Gemma4Layer {
    attn: Gemma4Attention,
    mlp: GegluMlp,
    input_norm: RmsNorm,
    post_attn_norm: RmsNorm,
    pre_ff_norm: RmsNorm,
    post_ff_norm: RmsNorm,
    per_layer: Option<PerLayerGate>,
    moe: Option<MoeBlock>,
    scalar: Option<Array>,
    /// Cache slot (None: KV-shared).
    slot: Option<usize>,
    /// Layer whose K/V this one reads.
    source: usize,
    /// Whether later layers read this one's K/V.
    shared_out: bool,
}

/// Loads decoder layer `i` from `{lp}.*`. A layer without K/V (`has_kv`
/// false: KV-shared, or an assistant layer reading the target's K/V) has no
/// k/v projections and no cache slot.
fn load_layer(
    cfg: &Config,
    w: &dyn Weights,
    lp: &str,
    i: usize,
    has_kv: bool,
    source: usize,
    shared_out: bool,
) -> Result<Gemma4Layer> {
    let (eps, h) = (cfg.rms_norm_eps, cfg.hidden_size);
    let pl = cfg.hidden_size_per_layer_input;
    let full = cfg.full[i];
    let head_dim = if full && cfg.global_head_dim > 0 { cfg.global_head_dim } else { cfg.head_dim };
    let k_eq_v = cfg.attention_k_eq_v && full;
    let n_kv_heads = match (k_eq_v, cfg.num_global_key_value_heads) {
        (true, Some(h)) => h,
        _ => cfg.num_key_value_heads,
    };
    let a = format!("{lp}.self_attn");
    let rope = if full { &cfg.rope_full } else { &cfg.rope_sliding }.rope(head_dim, cfg.rope_traditional)?;
    let q_norm = RmsNorm::load(w, &format!("{a}.q_norm"), head_dim, eps)?;
    let k_norm = has_kv.then(|| RmsNorm::load(w, &format!("{a}.k_norm"), head_dim, eps)).transpose()?;
    let n_heads = cfg.num_attention_heads;
    let (q_out, kv_out) = (n_heads * head_dim, n_kv_heads * head_dim);
    let lin = |n: &str, i: i32, o: i32| Linear::load(w, &format!("{a}.{n}"), i, o);
    let proj = match &k_norm {
        Some(kn) if !k_eq_v && w.get(&format!("{a}.qkv_proj.weight")).is_some() => Proj::Fused {
            qkv: lin("qkv_proj", h, q_out + 2 * kv_out)?,
            norms: HeadNorms::new(&q_norm, kn, n_heads, n_kv_heads)?,
        },
        _ => Proj::Split {
            q: lin("q_proj", h, q_out)?,
            k: has_kv.then(|| lin("k_proj", h, kv_out)).transpose()?,
            v: (has_kv && !k_eq_v).then(|| lin("v_proj", h, kv_out)).transpose()?,
        },
    };
    let attn = Gemma4Attention {
        proj,
        o: lin("o_proj", q_out, h)?,
        q_norm,
        k_norm,
        eps,
        n_heads,
        n_kv_heads,
        head_dim,
        rope,
        window: (!full).then_some(cfg.sliding_window),
    };
    let norm = |n: &str| RmsNorm::load(w, &format!("{lp}.{n}"), h, eps);
    let per_layer = (pl > 0)
        .then(|| -> Result<PerLayerGate> {
            Ok(PerLayerGate {
                gate: Linear::load(w, &format!("{lp}.per_layer_input_gate"), h, pl)?,
                proj: Linear::load(w, &format!("{lp}.per_layer_projection"), pl, h)?,
                norm: norm("post_per_layer_input_norm")?,
            })
        })
        .transpose()?;
    let moe = cfg
        .enable_moe_block
        .then(|| -> Result<MoeBlock> {
            Ok(MoeBlock {
                router: Router::load(w, &format!("{lp}.router"), cfg)?,
                experts: SwitchGlu::load(
                    w,
                    &format!("{lp}.experts.switch_glu"),
                    cfg.num_experts,
                    h,
                    cfg.moe_intermediate_size,
                    GluActivation::GeluApprox,
                )?,
                pre_norm: norm("pre_feedforward_layernorm_2")?,
                post_norm_dense: norm("post_feedforward_layernorm_1")?,
                post_norm_experts: norm("post_feedforward_layernorm_2")?,
            })
        })
        .transpose()?;
    let scalar = match w.get(&format!("{lp}.layer_scalar")) {
        Some(_) => Some(w.tensor(&format!("{lp}.layer_scalar"), &[1], Kind::Float)?),
        None => None,
    };
    Ok(Gemma4Layer {
        attn,
        moe,
        mlp: GegluMlp::load(w, &format!("{lp}.mlp"), h, cfg.mlp_width(i))?,
        input_norm: norm("input_layernorm")?,
        post_attn_norm: norm("post_attention_layernorm")?,
        pre_ff_norm: norm("pre_feedforward_layernorm")?,
        post_ff_norm: norm("post_feedforward_layernorm")?,
        per_layer,
        scalar,
        slot: has_kv.then_some(i),
        source,
        shared_out,
    })
}

/// Per-layer input embeddings (E2B/E4B).
#[derive(Debug, Clone)]
struct PerLayerInputs {
    embed: Embedding,
    embed_scale: f64,
    projection: Linear,
    projection_scale: f64,
    norm: RmsNorm,
    width: i32,
}

/// The Gemma 4 text model.
#[derive(Debug, Clone)]
pub struct Gemma4Text {
    embed: Embedding,
    embed_scale: f64,
    layers: Vec<Gemma4Layer>,
    norm: RmsNorm,
    lm_head: Option<Linear>,
    softcap: Option<f32>,
    per_layer: Option<PerLayerInputs>,
}

impl Gemma4Text {
    /// Builds the model from host-held weights.
    pub fn load(cfg: &Config, w: &dyn Weights) -> Result<Gemma4Text> {
        let root = cfg.prefix();
        let p = format!("{root}model");
        let eps = cfg.rms_norm_eps;
        let sources = cfg.kv_sources()?;
        let m = cfg.first_kv_shared() as usize;
        let n = cfg.num_hidden_layers as usize;
        let pl = cfg.hidden_size_per_layer_input;
        let layers = (0..n)
            .map(|i| {
                let has_kv = i < m;
                load_layer(cfg, w, &format!("{p}.layers.{i}"), i, has_kv, sources[i], sources[m..].contains(&i))
            })
            .collect::<Result<Vec<_>>>()?;
        let (h, v) = (cfg.hidden_size, cfg.vocab_size);
        let per_layer = (pl > 0)
            .then(|| -> Result<PerLayerInputs> {
                let all = n as i32 * pl;
                Ok(PerLayerInputs {
                    embed: Embedding::load(
                        w,
                        &format!("{p}.embed_tokens_per_layer"),
                        cfg.vocab_size_per_layer_input,
                        all,
                    )?,
                    embed_scale: (pl as f64).sqrt(),
                    projection: Linear::load(w, &format!("{p}.per_layer_model_projection"), h, all)?,
                    projection_scale: (h as f64).powf(-0.5),
                    norm: RmsNorm::load(w, &format!("{p}.per_layer_projection_norm"), pl, eps)?,
                    width: pl,
                })
            })
            .transpose()?;
        Ok(Gemma4Text {
            embed: Embedding::load(w, &format!("{p}.embed_tokens"), v, h)?,
            embed_scale: (h as f64).sqrt(),
            layers,
            norm: RmsNorm::load(w, &format!("{p}.norm"), h, eps)?,
            lm_head: if cfg.tie_word_embeddings {
                None
            } else {
                Some(Linear::load(w, &format!("{root}lm_head"), h, v)?)
            },
            softcap: cfg.final_logit_softcapping.filter(|c| *c > 0.0),
            per_layer,
        })
    }

    /// The per-layer inputs `[B, L, layers, width]`, from the token ids and
    /// the scaled input embeddings.
    fn per_layer_inputs(&self, pl: &PerLayerInputs, tokens: &Array, h: &Array) -> Result<Array> {
        let n = self.layers.len() as i32;
        let (b, l) = (h.dim(0), h.dim(1));
        let from_ids = pl.embed.forward(tokens)?.mul_s(pl.embed_scale)?.reshape(&[b, l, n, pl.width])?;
        let proj = pl.projection.forward(h)?.mul_s(pl.projection_scale)?.reshape(&[b, l, n, pl.width])?;
        let proj = pl.norm.forward(&proj)?;
        proj.add(&from_ids)?.mul_s(std::f64::consts::FRAC_1_SQRT_2)
    }
}

impl Gemma4Layer {
    fn forward(
        &self,
        x: &Array,
        caches: &mut Caches<'_>,
        shared: Option<&SharedKv>,
        per_layer_input: Option<&Array>,
    ) -> Result<(Array, Option<SharedKv>)> {
        let (a, kept) = self.attn.forward(&self.input_norm.forward(x)?, caches, self.slot, self.shared_out, shared)?;
        Ok((self.finish(x, &a, per_layer_input)?, kept))
    }

    /// The rest of the layer after its attention output `a`: residuals,
    /// MLP (and MoE), per-layer input gate, layer scalar.
    fn finish(&self, x: &Array, a: &Array, per_layer_input: Option<&Array>) -> Result<Array> {
        let h = x.add(&self.post_attn_norm.forward(a)?)?;
        let mut f = self.mlp.forward(&self.pre_ff_norm.forward(&h)?)?;
        if let Some(moe) = &self.moe {
            // Dense MLP and routed experts side by side, each normed, summed;
            // the router and experts read the residual itself.
            f = moe.post_norm_dense.forward(&f)?.add(&moe.experts(&h)?)?;
        }
        let mut h = h.add(&self.post_ff_norm.forward(&f)?)?;
        if let (Some(g), Some(pli)) = (&self.per_layer, per_layer_input) {
            let gate = geglu(&g.gate.forward(&h)?, pli)?;
            h = h.add(&g.norm.forward(&g.proj.forward(&gate)?)?)?;
        }
        if let Some(s) = &self.scalar {
            h = h.mul(s)?;
        }
        Ok(h)
    }
}

impl ModelForward for Gemma4Text {
    fn forward(&mut self, input: &Input, caches: &mut Caches<'_>) -> Result<Output> {
        let e = match &input.embeddings {
            Some(e) => e.clone(),
            None => self.embed.forward(&input.tokens)?,
        };
        let mut h = e.mul_s(self.embed_scale)?;
        let pli = match &self.per_layer {
            Some(pl) => Some(self.per_layer_inputs(pl, &input.tokens, &h)?),
            None => None,
        };
        let mut kept: Vec<Option<SharedKv>> = vec![None; self.layers.len()];
        for (i, layer) in self.layers.iter().enumerate() {
            let shared =
                if layer.slot.is_none() {
                    Some(kept[layer.source].as_ref().ok_or_else(|| {
                        Error(format!("gemma4: layer {i}: source layer {} kept no K/V", layer.source))
                    })?)
                } else {
                    None
                };
            let li = pli.as_ref().map(|p| p.slice_axis(2, i as i32, i as i32 + 1)?.squeeze(&[2])).transpose()?;
            let (out, k) = layer.forward(&h, caches, shared, li.as_ref())?;
            h = out;
            if k.is_some() {
                kept[i] = k;
            }
        }
        let h = self.norm.forward(&h)?;
        lm_output(h, input.logits, input.want_hidden, |x| {
            let logits = match &self.lm_head {
                Some(l) => l.forward(x)?,
                None => self.embed.as_linear(x)?,
            };
            match self.softcap {
                Some(c) => logits.div_s(c as f64)?.tanh()?.mul_s(c as f64),
                None => Ok(logits),
            }
        })
    }
}

#[cfg(feature = "export")]
plugin_api::export_plugin!("famlx-plugin-gemma4", [Gemma4Family]);
