//! `mytiny`: a worked example of a family plugin built outside the famlx
//! workspace. The architecture is Llama's pre-norm decoder, assembled from
//! the shared layers in `plugin_api::layers`; what makes it a family is the
//! four parts below: a config, a plan, weight-name rules, a build.

use plugin_api::config::{context_length, eos_ids, field_or, implied_head_dim, named_scaling, rope, DecoderFields};
use plugin_api::layers::{decoder_fusions, AttentionShape, DecoderLm, DecoderShape};
use plugin_api::mlx::nn::Weights;
use plugin_api::mlx::{Array, Result};
use plugin_api::serde::{Deserialize, Serialize};
use plugin_api::serde_json::Value;
use plugin_api::{CacheKind, Fusion, ModelPlan};
use plugin_api::{Family, FamilyConfig, Model};

/// Step 1, the config: the fields of config.json this family reads, parsed
/// once per plan (a missing or mistyped one is an error naming it). A field
/// the checkpoint may leave out gets its default here, so the struct holds
/// the values the model runs with.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(crate = "plugin_api::serde")]
pub struct Config {
    hidden_size: i32,
    intermediate_size: i32,
    num_hidden_layers: i32,
    num_attention_heads: i32,
    /// Default: `num_attention_heads` (see [`Config::fields`]).
    num_key_value_heads: Option<i32>,
    /// Default: `hidden_size / num_attention_heads`.
    head_dim: Option<i32>,
    rms_norm_eps: f32,
    vocab_size: i32,
    #[serde(default = "default_rope_theta")]
    rope_theta: f32,
    /// Interleaved (GPT-J style) rotation pairs instead of halves.
    #[serde(default)]
    rope_traditional: bool,
    /// default, linear, llama3, longrope/su (see `plugin_api::config::rope`).
    rope_scaling: Option<Value>,
    #[serde(default = "default_tied")]
    tie_word_embeddings: bool,
    /// 0: unknown.
    #[serde(default)]
    max_position_embeddings: i32,
}

fn default_rope_theta() -> f32 {
    10000.0
}

fn default_tied() -> bool {
    true
}

impl Config {
    fn fields(&self) -> Result<DecoderFields> {
        Ok(DecoderFields {
            hidden: self.hidden_size,
            layers: self.num_hidden_layers,
            intermediate: self.intermediate_size,
            heads: self.num_attention_heads,
            kv_heads: self.num_key_value_heads.unwrap_or(self.num_attention_heads),
            head_dim: match self.head_dim {
                Some(d) => d,
                None => implied_head_dim(self.hidden_size, self.num_attention_heads)?,
            },
            vocab: self.vocab_size,
        })
    }
}

impl FamilyConfig for Config {
    /// Refuse what cannot describe a real model, naming the field.
    fn check(&self) -> Result<()> {
        self.fields()?.check()?;
        named_scaling("rope_scaling", self.rope_scaling.as_ref(), self.max_position_embeddings)?;
        Ok(())
    }
}

/// The family.
pub struct MyTiny;

impl Family for MyTiny {
    type Config = Config;

    fn name(&self) -> &'static str {
        "mytiny"
    }

    /// The `model_type` values of config.json this plugin serves.
    fn model_types(&self) -> &'static [&'static str] {
        &["mytiny"]
    }

    /// Step 2, the plan: what the host must know to run the model (one full
    /// KV cache per layer here), and the config it carries (parsed back
    /// with serde when the host changes it).
    fn plan(&self, cfg: &Config, c: &Value) -> Result<ModelPlan> {
        let caches = vec![CacheKind::Full; cfg.num_hidden_layers as usize];
        let scaling = named_scaling("rope_scaling", cfg.rope_scaling.as_ref(), cfg.max_position_embeddings)?;
        Ok(ModelPlan::text("mytiny", "mytiny", cfg, caches, cfg.vocab_size, cfg.hidden_size)?
            .with_eos(eos_ids(c))
            .with_context(context_length(cfg.max_position_embeddings, &scaling))
            .with_dtype(&field_or::<String>(c, "torch_dtype", "bfloat16".into())?))
    }

    /// Step 3, weight-name rules: drop tensors the model does not use.
    fn rewrite(&self, _cfg: &Config, _plan: &ModelPlan, name: &str, t: Array) -> Result<Vec<(String, Array)>> {
        if name.ends_with("rotary_emb.inv_freq") {
            return Ok(vec![]);
        }
        Ok(vec![(name.to_string(), t)])
    }

    /// Optional: one matmul for q/k/v and one for gate/up per layer. The
    /// host concatenates the parts' rows at load (q, then k, then v; gate,
    /// then up) and `Attention` / `GatedMlp` take the fused tensors as they
    /// find them; a checkpoint that stores them fused already is used as is.
    fn fusions(&self, _cfg: &Config, plan: &ModelPlan) -> Vec<Fusion> {
        decoder_fusions(plan)
    }

    /// Step 4, build: the layers from the host's weights.
    fn build(&self, cfg: &Config, _plan: &ModelPlan, w: &dyn Weights) -> Result<Box<dyn Model>> {
        let f = cfg.fields()?;
        let scaling = cfg.rope_scaling.as_ref();
        let rope = rope(f.head_dim, cfg.rope_theta, cfg.rope_traditional, scaling, cfg.max_position_embeddings)?;
        let shape = DecoderShape {
            vocab: f.vocab,
            layers: f.layers,
            intermediate: f.intermediate,
            rms_norm_eps: cfg.rms_norm_eps,
            attention: AttentionShape::new(f.hidden, f.heads, f.kv_heads, f.head_dim),
            // An untied checkpoint run as tied would serve wrong tokens; the
            // host warns about its unread `lm_head.weight` (--strict refuses).
            tied: cfg.tie_word_embeddings,
        };
        // Every tensor is checked against these shapes as it is loaded.
        Ok(Box::new(DecoderLm::load(w, &shape, &rope)?))
    }
}

// Registration: the root module the host loads, with ABI and MLX stamps.
plugin_api::export_plugin!("famlx-plugin-mytiny", [MyTiny]);
