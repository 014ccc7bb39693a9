//! The llama family (Llama 2 / 3 / 3.1 / 3.2, Mistral, SmolLM2, SmolLM3,
//! Phi-3 / Phi-4-mini and friends): a config, the shared Llama-style
//! decoder, weight-name rules (GGUF included, see [`gguf`]) and one
//! registration. Phi-3 is Llama's decoder with q/k/v and gate/up stored
//! fused (the shared layers take them as stored), partial rotation and
//! LongRoPE. SmolLM3 (`smollm3`) is Llama's decoder with rope left out of
//! some layers (NoPE: `no_rope_layers`, or every `no_rope_layer_interval`-th).
//! A GGUF file of llama.cpp's `llama` architecture with experts (as its
//! converter writes Mixtral) gets routed experts in place of the MLP;
//! llama.cpp's `smollm3` and `phi3` files are read too.

pub mod gguf;

use mlx::nn::RopeScaling;
use mlx::nn::Weights;
use mlx::nn::{GatedMlp, GluActivation::Silu, Kind, NormKind, Rope};
use mlx::{Array, Error, Result};
use plugin_api::config::{
    config_error, context_length, eos_ids, field_or, implied_head_dim, in_range, limits, named_scaling, nullable,
    one_of, positive_finite, rope, DecoderFields,
};
use plugin_api::layers::{
    decoder_fusions, AttentionShape, BlockLayout, DecoderBlock, DecoderLm, DecoderSpec, FeedForward, LmDrafter,
    MoeShape, Routing, SparseMoe,
};
use plugin_api::{CacheKind, DraftRole, Fusion, ModelInfo, ModelPlan};
use plugin_api::{Drafter, Family, FamilyConfig, Model};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The config (config.json's fields, or a GGUF file's in their terms).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Config {
    pub hidden_size: i32,
    pub num_hidden_layers: i32,
    pub intermediate_size: i32,
    pub num_attention_heads: i32,
    /// Default: `num_attention_heads`.
    pub num_key_value_heads: Option<i32>,
    /// Default: `hidden_size / num_attention_heads`.
    pub head_dim: Option<i32>,
    pub rms_norm_eps: f32,
    pub vocab_size: i32,
    /// Default (absent or `null`): 10000.
    #[serde(default = "default_rope_theta", deserialize_with = "rope_theta_or_default")]
    pub rope_theta: f32,
    #[serde(default, deserialize_with = "nullable")]
    pub rope_traditional: bool,
    pub rope_scaling: Option<Value>,
    /// Fraction of each head that rotates (Phi-3 family). Default: 1.
    pub partial_rotary_factor: Option<f32>,
    /// Phi-3's trained context before LongRoPE (read when its
    /// `rope_scaling` does not carry it). Default: 4096.
    pub original_max_position_embeddings: Option<i32>,
    /// Default: true, false for phi3 (GGUF: whether the file has no `output.weight`).
    pub tie_word_embeddings: Option<bool>,
    pub max_position_embeddings: Option<i32>,
    pub hidden_act: Option<String>,
    /// Biases on q/k/v and o (mlx-lm's `attention_bias`). Default: false.
    #[serde(default, deserialize_with = "nullable")]
    pub attention_bias: bool,
    /// Biases on the MLP's projections (`mlp_bias`). Default: false.
    #[serde(default, deserialize_with = "nullable")]
    pub mlp_bias: bool,
    pub model_type: Option<String>,
    /// SmolLM3: per layer, 1 to rope, 0 for none (NoPE). Default: from
    /// `no_rope_layer_interval`. Read for `smollm3` only, as mlx-lm does.
    #[serde(default, deserialize_with = "nullable")]
    pub no_rope_layers: Option<Vec<i32>>,
    /// SmolLM3: every this-many-th layer (the 4th, 8th, ...) has no rope
    /// when `no_rope_layers` is absent. Default: 4.
    #[serde(default = "default_no_rope_interval", deserialize_with = "no_rope_interval_or_default")]
    pub no_rope_layer_interval: i32,
    /// A GGUF checkpoint: q/k rows come permuted for llama.cpp's rope.
    #[serde(default)]
    pub gguf: bool,
    /// GGUF: routed experts per layer (`llama.expert_count`, Mixtral's
    /// `num_local_experts`), mixed by softmax over the top k's logits.
    /// Read for GGUF files only.
    pub num_local_experts: Option<i32>,
    /// GGUF: experts per token (`llama.expert_used_count`).
    pub num_experts_per_tok: Option<i32>,
}

plugin_api::config_defaults! {
    // mlx-lm's rope base when a config has none (or `null`).
    default_rope_theta / rope_theta_or_default: f32 = 10000.0;
    // SmolLM3's NoPE spacing when a config has none.
    default_no_rope_interval / no_rope_interval_or_default: i32 = 4;
}

impl Config {
    fn kv_heads(&self) -> i32 {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    /// A GGUF file's routed experts (`None`: a plain MLP).
    fn experts(&self) -> Option<i32> {
        self.num_local_experts.filter(|&n| self.gguf && n > 0)
    }

    /// The experts in range, naming the field otherwise.
    fn check_experts(&self) -> Result<()> {
        let Some(n) = self.experts() else { return Ok(()) };
        in_range("num_local_experts", n, limits::EXPERTS)?;
        let Some(k) = self.num_experts_per_tok else {
            return Err(config_error("config: missing field `num_experts_per_tok`"));
        };
        if !(1..=n).contains(&k) {
            return Err(config_error(format!(
                "config: field `num_experts_per_tok` is {k}, must be in 1..={n} (`num_local_experts`)"
            )));
        }
        Ok(())
    }

    fn head_dim(&self) -> Result<i32> {
        match self.head_dim {
            Some(d) => Ok(d),
            None => implied_head_dim(self.hidden_size, self.num_attention_heads),
        }
    }

    fn is_phi3(&self) -> bool {
        self.model_type.as_deref() == Some("phi3")
    }

    /// The trained context (mlx-lm's phi3 default when absent: 131072).
    fn context(&self) -> i32 {
        self.max_position_embeddings.unwrap_or(if self.is_phi3() { 131072 } else { 0 })
    }

    /// Rotated features per head.
    fn rope_dims(&self) -> Result<i32> {
        Ok((self.head_dim()? as f32 * self.partial_rotary_factor.unwrap_or(1.0)) as i32)
    }

    /// The `rope_scaling` entry, with Phi-3's top-level
    /// `original_max_position_embeddings` moved in where LongRoPE needs it.
    fn scaling_entry(&self) -> Option<Value> {
        let mut s = self.rope_scaling.clone()?;
        let kind = s.get("type").or_else(|| s.get("rope_type")).and_then(Value::as_str);
        if matches!(kind, Some("longrope" | "su")) && s.get("original_max_position_embeddings").is_none() {
            s["original_max_position_embeddings"] = self.original_max_position_embeddings.unwrap_or(4096).into();
        }
        Some(s)
    }

    fn scaling(&self) -> Result<RopeScaling> {
        named_scaling("rope_scaling", self.scaling_entry().as_ref(), self.context())
    }

    /// Whether layer `i` ropes its queries and keys: all do, except
    /// SmolLM3's NoPE layers.
    fn ropes(&self, i: i32) -> bool {
        if self.model_type.as_deref() != Some("smollm3") {
            return true;
        }
        match &self.no_rope_layers {
            Some(l) => l.get(i as usize).is_none_or(|&r| r != 0),
            None => (i + 1) % self.no_rope_layer_interval != 0,
        }
    }

    /// SmolLM3's NoPE fields describe the layers there are.
    fn check_no_rope(&self) -> Result<()> {
        if self.model_type.as_deref() != Some("smollm3") {
            return Ok(());
        }
        in_range("no_rope_layer_interval", self.no_rope_layer_interval, limits::LAYERS)?;
        match &self.no_rope_layers {
            Some(l) if l.len() != self.num_hidden_layers as usize => Err(config_error(format!(
                "config: field `no_rope_layers` has {} entries, `num_hidden_layers` is {}",
                l.len(),
                self.num_hidden_layers
            ))),
            _ => Ok(()),
        }
    }
}

impl FamilyConfig for Config {
    /// Every field in range: a config that cannot describe a real model is
    /// refused naming the field, before anything is built.
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
        let p = self.partial_rotary_factor.unwrap_or(1.0);
        let dims = self.rope_dims()?;
        if !(p > 0.0 && p <= 1.0) || dims < 2 || dims % 2 != 0 {
            return Err(Error::msg(format!(
                "config: field `partial_rotary_factor` is {p}: it must be in (0, 1] and rotate an even number of features"
            )));
        }
        self.scaling()?;
        self.check_experts()?;
        self.check_no_rope()
    }
}

/// The family registration.
pub struct LlamaFamily;

impl Family for LlamaFamily {
    type Config = Config;

    fn name(&self) -> &'static str {
        "llama"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["llama", "mistral", "phi3", "smollm3"]
    }

    fn catalog(&self) -> Vec<ModelInfo> {
        vec![
            ModelInfo::text("llama")
                .examples(&["meta-llama/Llama-3.2-1B-Instruct", "mlx-community/Llama-3.2-3B-Instruct-4bit"])
                .gguf("llama"),
            ModelInfo::text("mistral").examples(&["mistralai/Mistral-7B-Instruct-v0.3"]),
            ModelInfo::text("phi3")
                .examples(&["microsoft/Phi-3-mini-4k-instruct", "microsoft/Phi-4-mini-instruct"])
                .gguf("phi3"),
            ModelInfo::text("smollm3").examples(&["HuggingFaceTB/SmolLM3-3B"]).gguf("smollm3"),
        ]
    }

    /// config.json, or a GGUF file's metadata put in its terms first.
    fn config(&self, raw: &Value) -> Result<Config> {
        let parse = |c: &Value| -> Result<Config> {
            let cfg: Config = plugin_api::config::parse(c)?;
            cfg.check()?;
            Ok(cfg)
        };
        if raw.get("format").and_then(Value::as_str) == Some("gguf") {
            parse(&gguf::config(raw)?).map_err(|e| gguf::rename_fields_of(e, gguf::arch(raw)))
        } else {
            parse(raw)
        }
    }

    fn plan(&self, cfg: &Config, config: &Value) -> Result<ModelPlan> {
        let model_type = field_or::<String>(config, "model_type", "llama".into())?;
        let caches = vec![CacheKind::Full; cfg.num_hidden_layers as usize];
        Ok(ModelPlan::text("llama", &model_type, cfg, caches, cfg.vocab_size, cfg.hidden_size)?
            .with_eos(eos_ids(config))
            .with_context(context_length(cfg.context(), &cfg.scaling()?))
            .with_dtype(&field_or::<String>(config, "torch_dtype", "bfloat16".into())?)
            .with_head_dims(&[cfg.head_dim()?]))
    }

    fn rewrite(&self, cfg: &Config, _plan: &ModelPlan, name: &str, t: Array) -> Result<Vec<(String, Array)>> {
        if name.contains("self_attn.rotary_emb.inv_freq") {
            return Ok(vec![]);
        }
        if !cfg.gguf {
            return Ok(vec![(name.to_string(), t)]);
        }
        if cfg.is_phi3() {
            // Phi-3's rows are Hugging Face's: nothing to unpermute.
            return Ok(gguf::phi3_tensor_name(name).map(|hf| (hf, t)).into_iter().collect());
        }
        if name == plugin_api::gguf::ROPE_FREQS {
            // Llama 3's rope scaling, read by the build.
            return Ok(vec![(name.to_string(), t)]);
        }
        let Some(hf) = gguf::tensor_name(name) else { return Ok(vec![]) };
        let t = if hf.contains("self_attn.q_proj.") {
            gguf::unpermute(&t, cfg.num_attention_heads)?
        } else if hf.contains("self_attn.k_proj.") {
            gguf::unpermute(&t, cfg.kv_heads())?
        } else {
            t
        };
        Ok(vec![(hf, t)])
    }

    /// One matmul for q/k/v and one for gate/up per layer.
    fn fusions(&self, _cfg: &Config, plan: &ModelPlan) -> Vec<Fusion> {
        decoder_fusions(plan)
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
        let head_dim = cfg.head_dim()?;
        let rope = rope_of(cfg, w)?;
        // GGUF files omit `output.weight` when the head is tied.
        let tied = match (cfg.gguf, cfg.tie_word_embeddings) {
            (true, _) => w.get("lm_head.weight").is_none(),
            (false, Some(t)) => t,
            (false, None) => !cfg.is_phi3(),
        };
        let (h, eps) = (cfg.hidden_size, cfg.rms_norm_eps);
        let attention = AttentionShape::new(h, cfg.num_attention_heads, cfg.kv_heads(), head_dim)
            .biases(cfg.attention_bias, cfg.attention_bias);
        let layout = BlockLayout::pre_norm(NormKind::Rms, eps);
        let spec = DecoderSpec::new(cfg.vocab_size, h, cfg.num_hidden_layers, tied, NormKind::Rms, eps);
        Ok(Box::new(DecoderLm::build(w, &spec, |i, p| {
            let ffn: Box<dyn FeedForward> = match cfg.experts() {
                Some(experts) => Box::new(SparseMoe::load(w, &format!("{p}.mlp"), &moe(cfg, experts))?),
                None => Box::new(GatedMlp::load_biased(
                    w,
                    &format!("{p}.mlp"),
                    h,
                    cfg.intermediate_size,
                    Silu,
                    cfg.mlp_bias,
                )?),
            };
            let rope = if cfg.ropes(i) { rope.clone() } else { Rope::none() };
            DecoderBlock::load(w, p, &layout, &attention, rope, ffn)
        })?))
    }
}

/// The rope a config describes, its scaling read from the tensors
/// llama.cpp's converter stores it in, when the checkpoint has them (a
/// GGUF file, or `famlx convert`'s output of one): LongRoPE's long factors
/// (phi3, see [`gguf`]) and llama3's per-pair period factors
/// (`rope_freqs`, Llama 3.1 / 3.2).
fn rope_of(cfg: &Config, w: &dyn Weights) -> Result<Rope> {
    let (dims, base, traditional) = (cfg.rope_dims()?, cfg.rope_theta, cfg.rope_traditional);
    match cfg.scaling()? {
        RopeScaling::LongRope { long_factor, mscale } if w.get(gguf::LONG_FACTORS).is_some() => {
            let factors = w.tensor(gguf::LONG_FACTORS, &[long_factor.len() as i32], Kind::Float)?;
            Rope::new(dims, base, traditional, &RopeScaling::LongRope { long_factor: factors.to_vec()?, mscale })
        }
        _ => match plugin_api::gguf::rope_from_freqs(w, dims, base, traditional)? {
            Some(rope) => Ok(rope),
            None => rope(dims, base, traditional, cfg.scaling_entry().as_ref(), cfg.context()),
        },
    }
}

/// The routed experts of a GGUF file with `experts` of them: llama.cpp's
/// softmax over every expert, renormalised over the top k, is mlx-lm's
/// Mixtral routing (softmax over the top k's logits).
fn moe(cfg: &Config, experts: i32) -> MoeShape {
    MoeShape {
        hidden: cfg.hidden_size,
        experts,
        top_k: cfg.num_experts_per_tok.unwrap_or(1),
        intermediate: cfg.intermediate_size,
        routing: Routing::TopKSoftmax,
        act: Silu,
        shared_intermediate: None,
        shared_gate: false,
    }
}
