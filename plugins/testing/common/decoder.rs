//! A Llama-style decoder planned and built from the shared layers, used by
//! the test plugins (reload-a/b, wrong-shape) that only differ in what their
//! forward does to the logits. Included with `#[path]` by each crate.

use mlx::nn::{Rope, Weights};
use mlx::Result;
use plugin_api::config::{field, field_or, rope_scaling};
use plugin_api::layers::{AttentionShape, DecoderLm, DecoderShape};
use plugin_api::{CacheKind, ModelPlan};
use serde_json::Value;

/// The plan of a test decoder serving `name`.
pub fn plan(name: &str, c: &Value) -> Result<ModelPlan> {
    let layers: u32 = field(c, "num_hidden_layers")?;
    let caches = (0..layers).map(|_| CacheKind::Full).collect();
    Ok(ModelPlan::text(name, name, c, caches, field(c, "vocab_size")?, field(c, "hidden_size")?)?.with_dtype("float32"))
}

/// Builds the decoder from the host's weights.
pub fn build(plan: &ModelPlan, w: &dyn Weights) -> Result<DecoderLm> {
    let c: Value = plan.config_as()?;
    let (heads, kv): (i32, i32) = (field(&c, "num_attention_heads")?, field(&c, "num_key_value_heads")?);
    let head_dim: i32 = field(&c, "head_dim")?;
    let rope = Rope::new(head_dim, field_or(&c, "rope_theta", 10000.0)?, false, &rope_scaling(&c)?)?;
    let shape = DecoderShape {
        vocab: field(&c, "vocab_size")?,
        layers: field(&c, "num_hidden_layers")?,
        intermediate: field(&c, "intermediate_size")?,
        rms_norm_eps: field(&c, "rms_norm_eps")?,
        attention: AttentionShape::new(field(&c, "hidden_size")?, heads, kv, head_dim),
        tied: field_or(&c, "tie_word_embeddings", true)?,
    };
    DecoderLm::load(w, &shape, &rope)
}
