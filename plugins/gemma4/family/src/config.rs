//! Gemma 4's text config (the `text_config` of multimodal checkpoints, or
//! the whole config of `gemma4_text` ones), mlx-lm's defaults where a field
//! is absent, every field checked before anything is built.

use mlx::nn::{Rope, RopeScaling};
use mlx::{Error, Result};
use plugin_api::config::{
    at_most, divides, in_range, limits, named_scaling, nullable, one_of, parse, positive_finite, present, text_config,
    DecoderFields,
};
use plugin_api::layers::AttentionShape;
use plugin_api::ModelPlan;
use serde::Deserialize;
use serde_json::Value;

/// Rope settings of one attention type (a `rope_parameters` entry).
#[derive(Debug, Clone, PartialEq)]
pub struct RopeParams {
    /// Base θ.
    pub theta: f32,
    /// Plain, linear or proportional (partial rotation: global layers).
    pub scaling: RopeScaling,
}

impl RopeParams {
    fn parse(which: &str, v: Option<&Value>) -> Result<RopeParams> {
        let v = v.filter(|v| !v.is_null());
        // An entry that is not an object has no fields: the defaults.
        let empty = Value::Object(Default::default());
        let entry: RopeEntry = parse(v.filter(|v| v.is_object()).unwrap_or(&empty))?;
        Ok(RopeParams { theta: entry.rope_theta, scaling: named_scaling(&format!("rope_parameters.{which}"), v, 0)? })
    }

    /// The rope over a head of `dims` features.
    pub fn rope(&self, dims: i32, traditional: bool) -> Result<Rope> {
        Rope::new(dims, self.theta, traditional, &self.scaling)
    }
}

plugin_api::config_defaults! {
    text_type / text_type_or_null: String = "gemma4_text".to_string();
    yes / yes_or_null: bool = true;
    five / five_or_null: i32 = 5;
    twenty / twenty_or_null: i32 = 20;
    d256 / d256_or_null: i32 = 256;
    d512 / d512_or_null: i32 = 512;
    vocab / vocab_or_null: i32 = 262144;
    context / context_or_null: i32 = 131072;
    eps / eps_or_null: f32 = 1e-6;
    softcap / softcap_or_null: f32 = 30.0;
    theta / theta_or_null: f32 = 10000.0;
}

/// A `rope_parameters` entry as written, its base (the scaling it
/// describes is read by [`named_scaling`]).
#[derive(Debug, Clone, Deserialize)]
struct RopeEntry {
    #[serde(default = "theta", deserialize_with = "theta_or_null")]
    rope_theta: f32,
}

/// What the top level of config.json says beside `text_config`.
#[derive(Debug, Clone, Deserialize)]
struct TopConfig {
    #[serde(default = "text_type", deserialize_with = "text_type_or_null")]
    model_type: String,
    /// mlx-lm's gemma4 wrapper takes the vocabulary from here.
    vocab_size: Option<i32>,
    #[serde(default = "yes", deserialize_with = "yes_or_null")]
    tie_word_embeddings: bool,
}

/// The text config as written (`text_config`, or the whole config of
/// `gemma4_text` checkpoints), mlx-lm's defaults where a field is absent;
/// [`Config::parse`] derives the model's [`Config`] from it.
#[derive(Debug, Clone, Deserialize)]
struct TextConfig {
    // The shape fields are required: a default would silently describe
    // another model than the checkpoint's.
    num_hidden_layers: i32,
    hidden_size: i32,
    intermediate_size: i32,
    num_attention_heads: i32,
    num_key_value_heads: i32,
    head_dim: i32,
    #[serde(default, deserialize_with = "present")]
    hidden_activation: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    hidden_act: Option<Value>,
    #[serde(default = "vocab", deserialize_with = "vocab_or_null")]
    vocab_size: i32,
    /// Read when not null, as a list of names.
    layer_types: Option<Value>,
    #[serde(default = "five", deserialize_with = "five_or_null")]
    sliding_window_pattern: i32,
    /// Per attention type (`full_attention`, `sliding_attention`).
    rope_parameters: Option<Value>,
    num_global_key_value_heads: Option<i32>,
    #[serde(default = "d512", deserialize_with = "d512_or_null")]
    global_head_dim: i32,
    #[serde(default = "eps", deserialize_with = "eps_or_null")]
    rms_norm_eps: f32,
    #[serde(default = "vocab", deserialize_with = "vocab_or_null")]
    vocab_size_per_layer_input: i32,
    #[serde(default = "d256", deserialize_with = "d256_or_null")]
    hidden_size_per_layer_input: i32,
    #[serde(default = "twenty", deserialize_with = "twenty_or_null")]
    num_kv_shared_layers: i32,
    #[serde(default = "d512", deserialize_with = "d512_or_null")]
    sliding_window: i32,
    #[serde(default, deserialize_with = "nullable")]
    rope_traditional: bool,
    #[serde(default, deserialize_with = "nullable")]
    attention_k_eq_v: bool,
    #[serde(default = "softcap", deserialize_with = "softcap_or_null")]
    final_logit_softcapping: f32,
    #[serde(default = "yes", deserialize_with = "yes_or_null")]
    use_double_wide_mlp: bool,
    #[serde(default, deserialize_with = "nullable")]
    enable_moe_block: bool,
    #[serde(default, deserialize_with = "nullable")]
    num_experts: i32,
    #[serde(default, deserialize_with = "nullable")]
    top_k_experts: i32,
    #[serde(default, deserialize_with = "nullable")]
    moe_intermediate_size: i32,
    /// The top level's when absent.
    tie_word_embeddings: Option<bool>,
    #[serde(default = "context", deserialize_with = "context_or_null")]
    max_position_embeddings: i32,
}

/// The model's view of the text config.
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

impl Config {
    /// From config.json (multimodal `gemma4` or `gemma4_text`).
    pub fn parse(c: &Value) -> Result<Config> {
        let top: TopConfig = parse(c)?;
        let t = text_config(c);
        let nested = !std::ptr::eq(t, c);
        let text: TextConfig = parse(t)?;
        let n = text.num_hidden_layers;
        // Checked before it sizes anything (layer_types, the plan's caches).
        in_range("num_hidden_layers", n, limits::LAYERS)?;
        let act = text.hidden_activation.as_ref().or(text.hidden_act.as_ref()).and_then(Value::as_str);
        // mlx-lm runs the tanh approximation of GELU for every GELU name.
        one_of("hidden_activation", act, &["gelu_pytorch_tanh", "gelu_new", "gelu_fast", "gelu"])?;
        // mlx-lm's gemma4 wrapper takes the vocabulary from the top level.
        let vocab = match top.vocab_size {
            Some(v) if nested => v,
            _ => text.vocab_size,
        };
        let full = match &text.layer_types {
            Some(types) => serde_json::from_value::<Vec<String>>(types.clone())
                .map_err(|e| Error::msg(format!("config: field `layer_types`: {e}")))?
                .iter()
                .map(|s| match s.as_str() {
                    "full_attention" => Ok(true),
                    "sliding_attention" => Ok(false),
                    other => Err(Error::msg(format!("config: layer_types: unsupported layer type {other:?}"))),
                })
                .collect::<Result<Vec<bool>>>()?,
            None => {
                let p = text.sliding_window_pattern;
                (0..n).map(|i| (i % p.max(1)) == p - 1).collect::<Vec<bool>>()
            }
        };
        if full.len() != n as usize {
            return Err(Error::msg(format!("config: layer_types has {} entries for {n} layers", full.len())));
        }
        let (rope_full, rope_sliding) = match &text.rope_parameters {
            Some(r) => (
                RopeParams::parse("full_attention", r.get("full_attention"))?,
                RopeParams::parse("sliding_attention", r.get("sliding_attention"))?,
            ),
            None => (
                RopeParams {
                    theta: 1e6,
                    scaling: RopeScaling::Proportional { partial_rotary_factor: 0.25, factor: 1.0 },
                },
                RopeParams { theta: 1e4, scaling: RopeScaling::None },
            ),
        };
        let cfg = Config {
            model_type: top.model_type,
            hidden_size: text.hidden_size,
            num_hidden_layers: n,
            intermediate_size: text.intermediate_size,
            num_attention_heads: text.num_attention_heads,
            num_key_value_heads: text.num_key_value_heads,
            num_global_key_value_heads: text.num_global_key_value_heads,
            head_dim: text.head_dim,
            global_head_dim: text.global_head_dim,
            rms_norm_eps: text.rms_norm_eps,
            vocab_size: vocab,
            vocab_size_per_layer_input: text.vocab_size_per_layer_input,
            hidden_size_per_layer_input: text.hidden_size_per_layer_input,
            num_kv_shared_layers: text.num_kv_shared_layers,
            sliding_window: text.sliding_window,
            full,
            rope_full,
            rope_sliding,
            rope_traditional: text.rope_traditional,
            attention_k_eq_v: text.attention_k_eq_v,
            final_logit_softcapping: Some(text.final_logit_softcapping),
            use_double_wide_mlp: text.use_double_wide_mlp,
            enable_moe_block: text.enable_moe_block,
            num_experts: text.num_experts,
            top_k_experts: text.top_k_experts,
            moe_intermediate_size: text.moe_intermediate_size,
            tie_word_embeddings: text.tie_word_embeddings.unwrap_or(top.tie_word_embeddings),
            max_position_embeddings: text.max_position_embeddings,
        };
        cfg.check()?;
        if cfg.num_kv_shared_layers < 0 || cfg.num_kv_shared_layers > n {
            return Err(Error::msg(format!("config: num_kv_shared_layers {} out of range", cfg.num_kv_shared_layers)));
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
            return Err(Error::msg(format!(
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
            match r.scaling {
                RopeScaling::Proportional { partial_rotary_factor: p, factor } => {
                    if !(0.0..=1.0).contains(&p) {
                        return Err(Error::msg(format!(
                            "config: field `rope_parameters.{which}.partial_rotary_factor` is {p}, must be in [0, 1]"
                        )));
                    }
                    positive_finite(&format!("rope_parameters.{which}.factor"), factor)?;
                }
                RopeScaling::None | RopeScaling::Linear { .. } => {}
                _ => {
                    return Err(Error::msg(format!(
                        "config: rope_parameters.{which}: gemma4 rotates plainly, linearly or proportionally"
                    )))
                }
            }
        }
        if let Some(c) = self.final_logit_softcapping {
            if !c.is_finite() {
                return Err(Error::msg(format!("config: field `final_logit_softcapping` is {c}, must be finite")));
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
                    .ok_or_else(|| Error::msg(format!("config: KV-shared layer {i} has no earlier layer of its type")))
            })
            .collect()
    }

    /// Re-parses the config the plan carries.
    pub fn from_plan(plan: &ModelPlan) -> Result<Config> {
        Config::parse(&plan.config_as::<Value>()?)
    }

    /// Head dim of a global (`full`) or sliding layer.
    pub fn head_dim_of(&self, full: bool) -> i32 {
        if full && self.global_head_dim > 0 {
            self.global_head_dim
        } else {
            self.head_dim
        }
    }

    /// The shape of layer `i`'s attention: q/k norms, a scale-free v norm,
    /// score scale 1, keys as values on K=V global layers; `has_kv` false
    /// for layers reading another's K/V.
    pub fn attention(&self, i: usize, has_kv: bool) -> AttentionShape {
        let full = self.full[i];
        let k_eq_v = self.attention_k_eq_v && full;
        let n_kv_heads = match (k_eq_v, self.num_global_key_value_heads) {
            (true, Some(h)) => h,
            _ => self.num_key_value_heads,
        };
        AttentionShape {
            v_norm_eps: Some(self.rms_norm_eps),
            k_eq_v,
            has_kv,
            scale: Some(1.0),
            ..AttentionShape::new(self.hidden_size, self.num_attention_heads, n_kv_heads, self.head_dim_of(full))
                .qk_norms(self.rms_norm_eps)
        }
    }

    /// The name prefix of the text model's tensors in the host's naming
    /// (mlx-lm's: `language_model.model.` for the multimodal wrappers,
    /// `gemma4` and `gemma4_unified`).
    pub fn prefix(&self) -> &'static str {
        if self.model_type == "gemma4" || self.model_type == "gemma4_unified" {
            "language_model."
        } else {
            ""
        }
    }
}
