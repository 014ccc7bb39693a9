//! Qwen3.5's config: the text part of config.json (`text_config` when
//! present), every field checked before anything is built, and beside it
//! the vision tower's ([`CheckpointConfig`]).

use crate::gdn::GdnDims;
use crate::image::ImageConfig;
use mlx::nn::{Rope, RopeScaling};
use mlx::{Error, Result};
use plugin_api::config::{
    at_most, divides, implied_head_dim, in_range, limits, named_scaling, nullable, one_of, parse, positive_finite,
    present, text_config,
};
use plugin_api::layers::AttentionShape;
use plugin_api::FamilyConfig;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// Everything a checkpoint's config says, parsed once per plan: the text
/// model's config and the vision tower's.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(try_from = "Value")]
pub struct CheckpointConfig {
    /// The text model.
    pub text: Config,
    /// The image settings as they parsed: a `vision_config` that does not
    /// describe a usable tower leaves a text model, and asking it for
    /// images says why.
    pub image: Result<Option<ImageConfig>>,
}

impl CheckpointConfig {
    /// From config.json (top level with or without `text_config`, the
    /// processor's settings beside it); checked by [`FamilyConfig::check`].
    pub fn parse(top: &Value) -> Result<CheckpointConfig> {
        Ok(CheckpointConfig { text: Config::parse(top)?, image: ImageConfig::parse(top) })
    }

    /// The image settings, or why the `vision_config` does not parse.
    pub fn image(&self) -> Result<Option<&ImageConfig>> {
        self.image.as_ref().map(Option::as_ref).map_err(Clone::clone)
    }
}

impl TryFrom<Value> for CheckpointConfig {
    type Error = Error;
    fn try_from(v: Value) -> Result<CheckpointConfig> {
        CheckpointConfig::parse(&v)
    }
}

impl FamilyConfig for CheckpointConfig {
    fn check(&self) -> Result<()> {
        self.text.check()
    }
}

plugin_api::config_defaults! {
    yes / yes_or_null: bool = true;
    one / one_or_null: i32 = 1;
    four / four_or_null: i32 = 4;
    eps / eps_or_null: f32 = 1e-6;
}

/// A number when the field holds one; any other value reads as absent.
pub(crate) fn any_number<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<f64>, D::Error> {
    Ok(Value::deserialize(d)?.as_f64())
}

/// A string when the field holds one; any other value reads as absent.
fn any_string<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<String>, D::Error> {
    Ok(Value::deserialize(d)?.as_str().map(str::to_string))
}

/// The text part of config.json as written (`text_config`, or the top
/// level without one); [`Config::parse`] derives the model's [`Config`]
/// from it.
#[derive(Debug, Clone, Deserialize)]
pub struct TextConfig {
    pub hidden_size: i32,
    pub num_attention_heads: i32,
    pub num_hidden_layers: i32,
    #[serde(default, deserialize_with = "any_string")]
    pub hidden_act: Option<String>,
    /// `hidden_size / num_attention_heads` when absent.
    pub head_dim: Option<i32>,
    /// Rope settings of new configs (read when it is an object); else the
    /// top-level `rope_theta`, `partial_rotary_factor`, `rope_scaling`.
    pub rope_parameters: Option<Value>,
    #[serde(default, deserialize_with = "any_number")]
    pub partial_rotary_factor: Option<f64>,
    #[serde(default, deserialize_with = "any_number")]
    pub rope_theta: Option<f64>,
    pub rope_scaling: Option<Value>,
    #[serde(default, deserialize_with = "nullable")]
    pub max_position_embeddings: i32,
    /// Every n-th layer is full attention (when there is no `layer_types`).
    #[serde(default = "four", deserialize_with = "four_or_null")]
    pub full_attention_interval: i32,
    /// `linear_attention` / `full_attention` per layer (read when a list).
    pub layer_types: Option<Value>,
    /// Routed experts (0: dense; else the [`MoeConfig`] fields are read).
    #[serde(default, deserialize_with = "nullable")]
    pub num_experts: i32,
    #[serde(default, deserialize_with = "present")]
    pub tie_word_embeddings: Option<Value>,
    pub intermediate_size: Option<i32>,
    /// `num_attention_heads` when absent.
    pub num_key_value_heads: Option<i32>,
    #[serde(default = "eps", deserialize_with = "eps_or_null")]
    pub rms_norm_eps: f32,
    pub vocab_size: i32,
    pub linear_num_key_heads: i32,
    pub linear_num_value_heads: i32,
    pub linear_key_head_dim: i32,
    pub linear_value_head_dim: i32,
    #[serde(default = "four", deserialize_with = "four_or_null")]
    pub linear_conv_kernel_dim: i32,
    #[serde(default = "one", deserialize_with = "one_or_null")]
    pub mtp_num_hidden_layers: i32,
}

/// MoE settings (read when `num_experts` is above 0).
#[derive(Debug, Clone, Deserialize)]
pub struct MoeConfig {
    /// routed experts
    pub num_experts: i32,
    /// experts per token
    #[serde(rename = "num_experts_per_tok")]
    pub top_k: i32,
    /// renormalise the top-k probabilities
    #[serde(default = "yes", deserialize_with = "yes_or_null")]
    pub norm_topk_prob: bool,
    /// every n-th layer is sparse
    #[serde(default = "one", deserialize_with = "one_or_null")]
    pub decoder_sparse_step: i32,
    /// layers that keep a dense MLP
    #[serde(default, deserialize_with = "nullable")]
    pub mlp_only_layers: Vec<i32>,
    /// width of each routed expert's MLP
    #[serde(rename = "moe_intermediate_size")]
    pub intermediate: i32,
    /// width of the shared expert's MLP
    #[serde(rename = "shared_expert_intermediate_size")]
    pub shared_intermediate: i32,
}

/// The model's view of the text config.
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
    pub rope_scaling: RopeScaling,
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

impl Config {
    /// From config.json (top level with or without `text_config`),
    /// unchecked (see [`Config::check`]).
    pub fn parse(top: &Value) -> Result<Config> {
        let c = text_config(top);
        let t: TextConfig = parse(c)?;
        let n_layers = t.num_hidden_layers;
        // Checked before it sizes anything (layer_types, the plan's caches).
        in_range("num_hidden_layers", n_layers, limits::LAYERS)?;
        one_of("hidden_act", t.hidden_act.as_deref(), &["silu", "swish"])?;
        let head_dim = match t.head_dim {
            Some(d) => d,
            None => implied_head_dim(t.hidden_size, t.num_attention_heads)?,
        };
        // Rope settings live in `rope_parameters` (new configs) or at the top level.
        let rp = t.rope_parameters.as_ref().filter(|v| v.is_object());
        let rope_f = |k: &str, top_level: Option<f64>, d: f64| match rp.and_then(|r| r.get(k)) {
            Some(v) => v.as_f64().unwrap_or(d),
            None => top_level.unwrap_or(d),
        };
        let partial = rope_f("partial_rotary_factor", t.partial_rotary_factor, 0.25);
        if !(partial > 0.0 && partial <= 1.0) {
            return Err(Error::msg(format!("config: field `partial_rotary_factor` is {partial}, must be in (0, 1]")));
        }
        let mpe = t.max_position_embeddings;
        let scaling = match rp {
            Some(rp) => named_scaling("rope_parameters", Some(rp), mpe)?,
            None => named_scaling("rope_scaling", t.rope_scaling.as_ref(), mpe)?,
        };
        let interval = t.full_attention_interval;
        in_range("full_attention_interval", interval, limits::LAYERS)?;
        let linear: Vec<bool> = match t.layer_types.as_ref().and_then(Value::as_array) {
            Some(types) => {
                if types.len() != n_layers as usize {
                    return Err(Error::msg(format!(
                        "config: layer_types has {} entries for {n_layers} layers",
                        types.len()
                    )));
                }
                types
                    .iter()
                    .map(|t| match t.as_str() {
                        Some("linear_attention") => Ok(true),
                        Some("full_attention") => Ok(false),
                        other => Err(Error::msg(format!("config: unsupported layer type {other:?}"))),
                    })
                    .collect::<Result<_>>()?
            }
            None => (0..n_layers).map(|i| (i + 1) % interval.max(1) != 0).collect(),
        };
        let moe = if t.num_experts > 0 { Some(parse::<MoeConfig>(c)?) } else { None };
        let tie = match t.tie_word_embeddings.as_ref().or_else(|| top.get("tie_word_embeddings")) {
            Some(v) => v.as_bool().unwrap_or(false),
            None => false,
        };
        Ok(Config {
            hidden_size: t.hidden_size,
            intermediate_size: t.intermediate_size,
            num_hidden_layers: n_layers,
            num_attention_heads: t.num_attention_heads,
            num_key_value_heads: t.num_key_value_heads.unwrap_or(t.num_attention_heads),
            head_dim,
            rms_norm_eps: t.rms_norm_eps,
            vocab_size: t.vocab_size,
            rope_theta: rope_f("rope_theta", t.rope_theta, 100_000.0) as f32,
            rope_dims: (head_dim as f64 * partial) as i32,
            rope_scaling: scaling,
            tie_word_embeddings: tie,
            max_position_embeddings: mpe,
            linear,
            gdn: GdnDims {
                k_heads: t.linear_num_key_heads,
                v_heads: t.linear_num_value_heads,
                k_dim: t.linear_key_head_dim,
                v_dim: t.linear_value_head_dim,
                conv_kernel: t.linear_conv_kernel_dim,
            },
            moe,
            mtp_layers: t.mtp_num_hidden_layers,
        })
    }

    /// The rope of the full-attention layers (partial: the first `rope_dims` features).
    pub fn rope(&self) -> Result<Rope> {
        Rope::new(self.rope_dims, self.rope_theta, false, &self.rope_scaling)
    }

    /// The shape of the gated full-attention layers.
    pub fn attention(&self) -> AttentionShape {
        AttentionShape {
            output_gate: true,
            ..AttentionShape::new(self.hidden_size, self.num_attention_heads, self.num_key_value_heads, self.head_dim)
                .qk_norms(self.rms_norm_eps)
        }
    }

    /// Every field in range, naming the field otherwise.
    pub fn check(&self) -> Result<()> {
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
            return Err(Error::msg(format!(
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

    /// Whether decoder layer `layer` has the sparse MoE block.
    pub fn is_sparse(&self, layer: i32) -> bool {
        match &self.moe {
            Some(m) => !m.mlp_only_layers.contains(&layer) && (layer + 1) % m.decoder_sparse_step.max(1) == 0,
            None => false,
        }
    }
}
