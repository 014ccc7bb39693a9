//! Qwen3.5's config: the text part of config.json (`text_config` when
//! present), every field checked before anything is built, and beside it
//! the vision tower's ([`CheckpointConfig`]).

use crate::gdn::GdnDims;
use crate::image::ImageConfig;
use mlx::nn::{Rope, RopeScaling};
use mlx::{Error, Result};
use plugin_api::config::{
    at_most, divides, field, field_or, implied_head_dim, in_range, limits, named_scaling, one_of, positive_finite,
    text_config,
};
use plugin_api::layers::AttentionShape;
use plugin_api::FamilyConfig;
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
        let mpe: i32 = field_or(c, "max_position_embeddings", 0)?;
        let scaling = if rp.is_object() {
            named_scaling("rope_parameters", Some(&rp), mpe)?
        } else {
            named_scaling("rope_scaling", c.get("rope_scaling"), mpe)?
        };
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
            max_position_embeddings: mpe,
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
        Ok(cfg)
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

    /// Whether decoder layer `layer` has the sparse MoE block.
    pub fn is_sparse(&self, layer: i32) -> bool {
        match &self.moe {
            Some(m) => !m.mlp_only_layers.contains(&layer) && (layer + 1) % m.decoder_sparse_step.max(1) == 0,
            None => false,
        }
    }
}
