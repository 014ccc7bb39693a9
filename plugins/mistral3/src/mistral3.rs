//! The mistral3 family: the text model of Mistral 3 checkpoints (Mistral
//! Small 3.1 / 3.2, Ministral 3), as mlx-lm loads them: the vision tower and
//! projector are left out, and the text model is the one `text_config`
//! names: Ministral 3's ([`crate::ministral3`]) for `ministral3`, else
//! Mistral's, which is Llama's decoder (sliding layers where `layer_types`
//! has them). Its tensors live under `language_model.`.
//!
//! Also reads GGUF files of llama.cpp's `mistral3` architecture (`gguf.rs`),
//! as a Ministral 3 text model.

use crate::ministral3::{self, sanitize, SlidingLayers};
use mlx::nn::{GatedMlp, GluActivation, NormKind, Weights};
use mlx::{Array, Error, Result};
use plugin_api::config::{
    config_error, context_length, eos_ids, field_or, implied_head_dim, named_scaling, nullable, one_of, parse,
    positive_finite, rope, DecoderFields,
};
use plugin_api::layers::{AttentionShape, BlockLayout, DecoderBlock, DecoderLm, DecoderSpec, LmDrafter};
use plugin_api::{DraftRole, Fusion, ModelInfo, ModelPlan};
use plugin_api::{Drafter, Family, FamilyConfig, Model};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where the text model's tensors live.
const PREFIX: &str = "language_model.";

/// The text config of a Mistral (Llama-decoder) text model (mlx-lm's
/// llama `ModelArgs`; defaults as its).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MistralText {
    pub hidden_size: i32,
    pub num_hidden_layers: i32,
    pub intermediate_size: i32,
    pub num_attention_heads: i32,
    pub rms_norm_eps: f32,
    pub vocab_size: i32,
    /// Default: `hidden_size / num_attention_heads`.
    pub head_dim: Option<i32>,
    pub max_position_embeddings: Option<i32>,
    /// Default: `num_attention_heads`.
    pub num_key_value_heads: Option<i32>,
    /// Biases on q/k/v and o. Default: false.
    #[serde(default, deserialize_with = "nullable")]
    pub attention_bias: bool,
    /// Biases on the MLP's projections. Default: false.
    #[serde(default, deserialize_with = "nullable")]
    pub mlp_bias: bool,
    /// Default (absent or `null`): 10000.
    #[serde(default = "default_rope_theta", deserialize_with = "rope_theta_or_default")]
    pub rope_theta: f32,
    #[serde(default, deserialize_with = "nullable")]
    pub rope_traditional: bool,
    pub rope_scaling: Option<Value>,
    /// Default here: false (mlx-lm's mistral3 sets it so when absent).
    #[serde(default, deserialize_with = "nullable")]
    pub tie_word_embeddings: bool,
    /// Which layers slide.
    #[serde(flatten)]
    pub layers: SlidingLayers,
    pub hidden_act: Option<String>,
}

plugin_api::config_defaults! {
    // mlx-lm's llama rope base when a config has none (or `null`).
    default_rope_theta / rope_theta_or_default: f32 = 10000.0;
}

impl MistralText {
    fn kv_heads(&self) -> i32 {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    fn head_dim(&self) -> Result<i32> {
        match self.head_dim {
            Some(d) => Ok(d),
            None => implied_head_dim(self.hidden_size, self.num_attention_heads),
        }
    }

    fn context(&self) -> Result<u32> {
        let mpe = self.max_position_embeddings.unwrap_or(0);
        Ok(context_length(mpe, &named_scaling("rope_scaling", self.rope_scaling.as_ref(), mpe)?))
    }

    /// Loads the decoder under [`PREFIX`].
    fn load(&self, w: &dyn Weights) -> Result<DecoderLm> {
        let (h, eps, mpe) = (self.hidden_size, self.rms_norm_eps, self.max_position_embeddings.unwrap_or(0));
        let head_dim = self.head_dim()?;
        let rope = rope(head_dim, self.rope_theta, self.rope_traditional, self.rope_scaling.as_ref(), mpe)?;
        let attention = AttentionShape::new(h, self.num_attention_heads, self.kv_heads(), head_dim)
            .biases(self.attention_bias, self.attention_bias);
        let layout = BlockLayout::pre_norm(NormKind::Rms, eps);
        let spec = DecoderSpec {
            prefix: PREFIX,
            ..DecoderSpec::new(self.vocab_size, h, self.num_hidden_layers, self.tie_word_embeddings, NormKind::Rms, eps)
        };
        DecoderLm::build(w, &spec, |_, p| {
            let mlp = GatedMlp::load_biased(
                w,
                &format!("{p}.mlp"),
                h,
                self.intermediate_size,
                GluActivation::Silu,
                self.mlp_bias,
            )?;
            DecoderBlock::load(w, p, &layout, &attention, rope.clone(), Box::new(mlp))
        })
    }
}

impl FamilyConfig for MistralText {
    /// Every field in range, naming the field otherwise.
    fn check(&self) -> Result<()> {
        one_of("hidden_act", self.hidden_act.as_deref(), &["silu", "swish"])?;
        DecoderFields {
            hidden: self.hidden_size,
            layers: self.num_hidden_layers,
            intermediate: self.intermediate_size,
            heads: self.num_attention_heads,
            kv_heads: self.kv_heads(),
            head_dim: self.head_dim()?,
            vocab: self.vocab_size,
        }
        .check()?;
        positive_finite("rope_theta", self.rope_theta)?;
        positive_finite("rms_norm_eps", self.rms_norm_eps)?;
        self.context()?;
        self.layers.check(self.num_hidden_layers)
    }
}

/// The config: the text model's, of the kind `text_config.model_type` names.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Config {
    /// Ministral 3's text model (`ministral3`).
    Ministral3 {
        /// its config
        text_config: ministral3::Config,
    },
    /// Mistral's (`mistral`, `llama`, or none named).
    Mistral {
        /// its config
        text_config: MistralText,
    },
}

impl FamilyConfig for Config {}

/// `text_config` parsed as `T` (errors naming `text_config.<field>`) and checked.
fn text_config<T: DeserializeOwned + FamilyConfig>(text: Value) -> Result<T> {
    #[derive(Deserialize)]
    struct Wrapped<T> {
        text_config: T,
    }
    let cfg: Wrapped<T> = parse(&serde_json::json!({ "text_config": text }))?;
    let in_text = |e: Error| config_error(e.msg.replacen("config: field `", "config: field `text_config.", 1));
    cfg.text_config.check().map_err(in_text)?;
    Ok(cfg.text_config)
}

impl Config {
    fn layers(&self) -> i32 {
        match self {
            Config::Ministral3 { text_config: t } => t.num_hidden_layers,
            Config::Mistral { text_config: t } => t.num_hidden_layers,
        }
    }

    /// The query and key/value head counts.
    fn heads(&self) -> (i32, i32) {
        match self {
            Config::Ministral3 { text_config: t } => {
                (t.num_attention_heads, t.num_key_value_heads.unwrap_or(t.num_attention_heads))
            }
            Config::Mistral { text_config: t } => (t.num_attention_heads, t.kv_heads()),
        }
    }

    fn tied(&self) -> bool {
        match self {
            Config::Ministral3 { text_config: t } => t.tie_word_embeddings,
            Config::Mistral { text_config: t } => t.tie_word_embeddings,
        }
    }
}

/// The family registration.
pub struct Mistral3Family;

impl Family for Mistral3Family {
    type Config = Config;

    fn name(&self) -> &'static str {
        "mistral3"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["mistral3"]
    }

    fn catalog(&self) -> Vec<ModelInfo> {
        vec![ModelInfo::text("mistral3")
            .examples(&[
                "mistralai/Mistral-Small-3.1-24B-Instruct-2503",
                "mistralai/Mistral-Small-3.2-24B-Instruct-2506",
            ])
            .sliding()
            .gguf("mistral3")]
    }

    /// The text model `text_config.model_type` names (mlx-lm's choice:
    /// `ministral3`, else Llama's decoder), its head untied unless the text
    /// config says otherwise. A GGUF file's metadata is a Ministral 3's.
    fn config(&self, raw: &Value) -> Result<Config> {
        if plugin_api::gguf::is_gguf(raw) {
            return Ok(Config::Ministral3 { text_config: crate::gguf::config(raw)? });
        }
        let Some(text) = raw.get("text_config").filter(|t| t.is_object()) else {
            return Err(config_error("config: missing field `text_config`"));
        };
        let mut text = text.clone();
        if text.get("tie_word_embeddings").is_none_or(Value::is_null) {
            text["tie_word_embeddings"] = false.into();
        }
        let kind = text.get("model_type").and_then(Value::as_str).map(str::to_owned);
        one_of("text_config.model_type", kind.as_deref(), &["ministral3", "mistral", "llama"])?;
        Ok(match kind.as_deref() {
            Some("ministral3") => Config::Ministral3 { text_config: text_config(text)? },
            _ => Config::Mistral { text_config: text_config(text)? },
        })
    }

    /// The checkpoint's config is the plan's: [`Family::config`] reads it again.
    fn plan(&self, cfg: &Config, config: &Value) -> Result<ModelPlan> {
        let (caches, vocab, hidden, context, head_dim) = match cfg {
            Config::Ministral3 { text_config: t } => {
                (t.layers.caches(t.num_hidden_layers), t.vocab_size, t.hidden_size, t.context()?, t.head_dim()?)
            }
            Config::Mistral { text_config: t } => {
                (t.layers.caches(t.num_hidden_layers), t.vocab_size, t.hidden_size, t.context()?, t.head_dim()?)
            }
        };
        let dtype = field_or::<String>(config, "torch_dtype", "bfloat16".into())?;
        Ok(ModelPlan::text("mistral3", "mistral3", config, caches, vocab, hidden)?
            .with_eos(eos_ids(config))
            .with_context(context)
            .with_dtype(&dtype)
            .with_head_dims(&[head_dim]))
    }

    /// mlx-lm's names: the vision tower and projector dropped, the text
    /// model's tensors under `language_model.` (`model.language_model.*`,
    /// as newer checkpoints store them, read as `language_model.model.*`),
    /// then the text model's own sanitize.
    fn rewrite(&self, cfg: &Config, _plan: &ModelPlan, name: &str, t: Array) -> Result<Vec<(String, Array)>> {
        let (heads, kv_heads) = cfg.heads();
        let (name, t) = crate::gguf::tensor(name, t, heads, kv_heads)?;
        let name = name.as_str();
        if name.contains("vision_tower") || name.contains("multi_modal_projector") {
            return Ok(vec![]);
        }
        let text_name = match name.strip_prefix("model.language_model.") {
            Some(rest) => format!("model.{rest}"),
            None => name.strip_prefix(PREFIX).unwrap_or(name).to_string(),
        };
        let kept = sanitize(cfg.tied(), &text_name, t)?;
        Ok(kept.into_iter().map(|(n, t)| (format!("{PREFIX}{n}"), t)).collect())
    }

    /// One matmul for q/k/v and one for gate/up per layer.
    fn fusions(&self, cfg: &Config, _plan: &ModelPlan) -> Vec<Fusion> {
        ministral3::fusions(PREFIX, cfg.layers())
    }

    /// A separate checkpoint of this family drafts as a small LM (`--draft-model`).
    fn build_drafter(
        &self,
        role: DraftRole,
        cfg: &Config,
        plan: &ModelPlan,
        w: &dyn Weights,
        _target_plan: &ModelPlan,
        _target: &dyn Weights,
    ) -> Result<Option<Box<dyn Drafter>>> {
        LmDrafter::for_separate_checkpoint(role, plan, || self.build(cfg, plan, w))
    }

    fn build(&self, cfg: &Config, _plan: &ModelPlan, w: &dyn Weights) -> Result<Box<dyn Model>> {
        Ok(match cfg {
            Config::Ministral3 { text_config: t } => Box::new(ministral3::load(t, w, PREFIX)?),
            Config::Mistral { text_config: t } => Box::new(t.load(w)?),
        })
    }
}
