//! A Llama-style decoder planned and built from the shared layers, used by
//! the test plugins (reload-a/b, wrong-shape) that only differ in what their
//! forward does to the logits. Included with `#[path]` by each crate.

use mlx::nn::{Rope, Weights};
use mlx::{Error, Result};
use plugin_api::layers::{field, field_or, rope_scaling, AttentionShape, DecoderLm, DecoderShape};
use plugin_api::{CacheKind, ModelPlan};
use serde_json::Value;

/// The plan of a test decoder serving `name`.
pub fn plan(name: &str, c: &Value) -> Result<ModelPlan> {
    let layers: u32 = field(c, "num_hidden_layers")?;
    Ok(ModelPlan {
        family: name.into(),
        model_type: name.into(),
        config: c.to_string().into(),
        caches: (0..layers).map(|_| CacheKind::Full).collect(),
        eos_ids: Vec::new().into(),
        vocab_size: field(c, "vocab_size")?,
        hidden_size: field(c, "hidden_size")?,
        max_position_embeddings: 0,
        modalities: vec!["text".into()].into(),
        dtype: "float32".into(),
        add_bos: abi_stable::std_types::ROption::RNone,
    })
}

/// Builds the decoder from the host's weights.
pub fn build(plan: &ModelPlan, w: &dyn Weights) -> Result<DecoderLm> {
    let c: Value = serde_json::from_str(plan.config.as_str()).map_err(|e| Error(e.to_string()))?;
    let (heads, kv): (i32, i32) = (field(&c, "num_attention_heads")?, field(&c, "num_key_value_heads")?);
    let head_dim: i32 = field(&c, "head_dim")?;
    let eps: f32 = field(&c, "rms_norm_eps")?;
    let rope = Rope::new(head_dim, field_or(&c, "rope_theta", 10000.0)?, false, &rope_scaling(&c)?)?;
    let shape = DecoderShape {
        vocab: field(&c, "vocab_size")?,
        layers: field(&c, "num_hidden_layers")?,
        intermediate: field(&c, "intermediate_size")?,
        rms_norm_eps: eps,
        attention: AttentionShape {
            hidden: field(&c, "hidden_size")?,
            n_heads: heads,
            n_kv_heads: kv,
            head_dim,
            qk_norm_eps: None,
        },
        tied: field_or(&c, "tie_word_embeddings", true)?,
    };
    DecoderLm::load(w, &shape, &rope)
}
