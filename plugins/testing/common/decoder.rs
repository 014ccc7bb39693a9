//! A Llama-style decoder planned and built from the shared layers, used by
//! the test plugins (reload-a/b, wrong-shape, split-fused) that only differ
//! in what their forward does to the logits. Included with `#[path]` by
//! each crate.

use mlx::nn::{Rope, Weights};
use mlx::Result;
use plugin_api::config::named_scaling;
use plugin_api::layers::{AttentionShape, DecoderLm, DecoderShape};
use plugin_api::FamilyConfig;
use plugin_api::{CacheKind, ModelPlan};
use serde::Deserialize;
use serde_json::Value;

/// The test decoder's config.
#[derive(Debug, Clone, Deserialize)]
pub struct Config {
    pub num_hidden_layers: i32,
    pub vocab_size: i32,
    pub hidden_size: i32,
    pub num_attention_heads: i32,
    pub num_key_value_heads: i32,
    pub head_dim: i32,
    pub intermediate_size: i32,
    pub rms_norm_eps: f32,
    #[serde(default = "default_rope_theta")]
    pub rope_theta: f32,
    pub rope_scaling: Option<Value>,
    #[serde(default)]
    pub max_position_embeddings: i32,
    #[serde(default = "default_tied")]
    pub tie_word_embeddings: bool,
}

fn default_rope_theta() -> f32 {
    10000.0
}

fn default_tied() -> bool {
    true
}

impl FamilyConfig for Config {}

/// The plan of a test decoder serving `name`, the checkpoint's config `raw` stored.
pub fn plan(name: &str, c: &Config, raw: &Value) -> Result<ModelPlan> {
    let caches = (0..c.num_hidden_layers).map(|_| CacheKind::Full).collect();
    Ok(ModelPlan::text(name, name, raw, caches, c.vocab_size, c.hidden_size)?.with_dtype("float32"))
}

/// Builds the decoder from the host's weights.
pub fn build(c: &Config, w: &dyn Weights) -> Result<DecoderLm> {
    let scaling = named_scaling("rope_scaling", c.rope_scaling.as_ref(), c.max_position_embeddings)?;
    let rope = Rope::new(c.head_dim, c.rope_theta, false, &scaling)?;
    let shape = DecoderShape {
        vocab: c.vocab_size,
        layers: c.num_hidden_layers,
        intermediate: c.intermediate_size,
        rms_norm_eps: c.rms_norm_eps,
        attention: AttentionShape::new(c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim),
        tied: c.tie_word_embeddings,
    };
    DecoderLm::load(w, &shape, &rope)
}
