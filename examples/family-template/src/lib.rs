//! `mytiny`: a worked example of a family plugin built outside the famlx
//! workspace. The architecture is Llama's pre-norm decoder, assembled from
//! the shared layers in `plugin_api::layers`; what makes it a family is the
//! four parts below: a config, a plan, weight-name rules, a build.

use plugin_api::family::{FamilySpec, ModelForward};
use plugin_api::layers::{eos_ids, field, field_or, rope_scaling, AttentionShape, DecoderLm, DecoderShape};
use plugin_api::mlx::nn::{Rope, Weights};
use plugin_api::mlx::{Array, Error, Result};
use plugin_api::serde_json::Value;
use plugin_api::{CacheKind, ModelPlan};

/// Step 1, the config: the fields of config.json this family reads.
struct Config {
    hidden: i32,
    intermediate: i32,
    layers: i32,
    heads: i32,
    kv_heads: i32,
    head_dim: i32,
    eps: f32,
    vocab: i32,
    rope: Rope,
    tied: bool,
}

impl Config {
    fn parse(c: &Value) -> Result<Config> {
        let hidden: i32 = field(c, "hidden_size")?;
        let heads: i32 = field(c, "num_attention_heads")?;
        let head_dim = field_or(c, "head_dim", hidden / heads)?;
        Ok(Config {
            hidden,
            intermediate: field(c, "intermediate_size")?,
            layers: field(c, "num_hidden_layers")?,
            heads,
            kv_heads: field_or(c, "num_key_value_heads", heads)?,
            head_dim,
            eps: field(c, "rms_norm_eps")?,
            vocab: field(c, "vocab_size")?,
            rope: Rope::new(head_dim, field_or(c, "rope_theta", 10000.0)?, false, &rope_scaling(c)?)?,
            tied: field_or(c, "tie_word_embeddings", true)?,
        })
    }
}

/// The family.
pub struct MyTiny;

impl FamilySpec for MyTiny {
    fn name(&self) -> &'static str {
        "mytiny"
    }

    /// The `model_type` values of config.json this plugin serves.
    fn model_types(&self) -> &'static [&'static str] {
        &["mytiny"]
    }

    /// Step 2, the plan: what the host must know to run the model — one full KV
    /// cache per layer here.
    fn plan(&self, c: &Value) -> Result<ModelPlan> {
        let cfg = Config::parse(c)?;
        Ok(ModelPlan {
            family: "mytiny".into(),
            model_type: "mytiny".into(),
            config: c.to_string().into(),
            caches: (0..cfg.layers).map(|_| CacheKind::Full).collect(),
            eos_ids: eos_ids(c).into(),
            vocab_size: cfg.vocab as u32,
            hidden_size: cfg.hidden as u32,
            max_position_embeddings: field_or(c, "max_position_embeddings", 0u32)?,
            modalities: vec!["text".into()].into(),
            dtype: field_or::<String>(c, "torch_dtype", "float32".into())?.into(),
            add_bos: abi_stable::std_types::ROption::RNone,
        })
    }

    /// Step 3, weight-name rules: drop tensors the model does not use.
    fn rewrite(&self, _plan: &ModelPlan, name: &str, t: Array) -> Result<Vec<(String, Array)>> {
        if name.ends_with("rotary_emb.inv_freq") {
            return Ok(vec![]);
        }
        Ok(vec![(name.to_string(), t)])
    }

    /// Step 4, build: the layers from the host's weights.
    fn build(&self, plan: &ModelPlan, w: &dyn Weights) -> Result<Box<dyn ModelForward>> {
        let c: Value = plugin_api::serde_json::from_str(plan.config.as_str()).map_err(|e| Error(e.to_string()))?;
        let cfg = Config::parse(&c)?;
        let shape = DecoderShape {
            vocab: cfg.vocab,
            layers: cfg.layers,
            intermediate: cfg.intermediate,
            rms_norm_eps: cfg.eps,
            attention: AttentionShape {
                hidden: cfg.hidden,
                n_heads: cfg.heads,
                n_kv_heads: cfg.kv_heads,
                head_dim: cfg.head_dim,
                qk_norm_eps: None,
            },
            tied: cfg.tied,
        };
        // Every tensor is checked against these shapes as it is loaded.
        Ok(Box::new(DecoderLm::load(w, &shape, &cfg.rope)?))
    }
}

// Registration: the root module the host loads, with ABI and MLX stamps.
plugin_api::export_plugin!("famlx-plugin-mytiny", [MyTiny]);
