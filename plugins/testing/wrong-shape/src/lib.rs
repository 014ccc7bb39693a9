//! A well-formed plugin whose family claims `model_type: wrongshape`, plans
//! and builds a Llama-style decoder from the shared layers (like the reload
//! test plugins), but whose forward drops the last vocabulary column of the
//! logits. The host must report the shape mismatch as an error naming the
//! plugin and both shapes, not panic or read out of bounds.

use mlx::nn::{Embedding, GatedMlp, Linear, RmsNorm, Rope, Weights};
use mlx::{Error, Result};
use plugin_api::family::{Caches, FamilySpec, Input, ModelForward, Output};
use plugin_api::layers::{field, field_or, rope_scaling, Attention, DecoderLm, PreNormBlock};
use plugin_api::{CacheKind, ModelPlan};
use serde_json::Value;

/// The family.
pub struct WrongShapeFamily;

struct Truncated {
    inner: DecoderLm,
}

impl ModelForward for Truncated {
    fn forward(&mut self, input: &Input, caches: &mut Caches<'_>) -> Result<Output> {
        let mut out = self.inner.forward(input, caches)?;
        if let Some(l) = out.logits.take() {
            // `[B, L, V]` → `[B, L, V - 1]`.
            out.logits = Some(l.slice_axis(-1, 0, l.dim(-1) - 1)?);
        }
        Ok(out)
    }
}

impl FamilySpec for WrongShapeFamily {
    fn name(&self) -> &'static str {
        "wrongshape"
    }
    fn model_types(&self) -> &'static [&'static str] {
        &["wrongshape"]
    }
    fn plan(&self, c: &Value) -> Result<ModelPlan> {
        let layers: u32 = field(c, "num_hidden_layers")?;
        Ok(ModelPlan {
            family: "wrongshape".into(),
            model_type: "wrongshape".into(),
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
    fn build(&self, plan: &ModelPlan, w: &dyn Weights) -> Result<Box<dyn ModelForward>> {
        let c: Value = serde_json::from_str(plan.config.as_str()).map_err(|e| Error(e.to_string()))?;
        let (heads, kv): (i32, i32) = (field(&c, "num_attention_heads")?, field(&c, "num_key_value_heads")?);
        let head_dim: i32 = field(&c, "head_dim")?;
        let eps: f32 = field(&c, "rms_norm_eps")?;
        let rope = Rope::new(head_dim, field_or(&c, "rope_theta", 10000.0)?, false, &rope_scaling(&c)?)?;
        let blocks = (0..field::<i32>(&c, "num_hidden_layers")?)
            .map(|i| {
                let p = format!("model.layers.{i}");
                Ok(PreNormBlock {
                    attn: Attention::load(w, &format!("{p}.self_attn"), heads, kv, head_dim, rope.clone(), None)?,
                    mlp: GatedMlp::load(w, &format!("{p}.mlp"))?,
                    input_norm: RmsNorm::load(w, &format!("{p}.input_layernorm"), eps)?,
                    post_attn_norm: RmsNorm::load(w, &format!("{p}.post_attention_layernorm"), eps)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let tied: bool = field_or(&c, "tie_word_embeddings", true)?;
        let inner = DecoderLm {
            embed: Embedding::load(w, "model.embed_tokens")?,
            blocks,
            norm: RmsNorm::load(w, "model.norm", eps)?,
            lm_head: if tied { None } else { Some(Linear::load(w, "lm_head")?) },
        };
        Ok(Box::new(Truncated { inner }))
    }
}

plugin_api::export_plugin!("famlx-testplugin-wrong-shape", [WrongShapeFamily]);
