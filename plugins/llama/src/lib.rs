//! The llama family (Llama 2 / 3 / 3.1 / 3.2, SmolLM2 and friends): config,
//! layers, forward, weight-name rules, registration.

use mlx::nn::{Rope, RopeScaling, Weights};
use mlx::{Array, Error, Result};
use plugin_api::config::{implied_head_dim, one_of, positive_finite, DecoderFields};
use plugin_api::family::{FamilySpec, ModelForward};
use plugin_api::layers::{eos_ids, field, field_or, rope_scaling, AttentionShape, DecoderLm, DecoderShape};
use plugin_api::{CacheKind, ModelPlan};
use serde_json::{json, Value};

/// The parsed config.
#[derive(Debug, Clone)]
pub struct Config {
    pub hidden_size: i32,
    pub num_hidden_layers: i32,
    pub intermediate_size: i32,
    pub num_attention_heads: i32,
    pub num_key_value_heads: i32,
    pub head_dim: i32,
    pub rms_norm_eps: f32,
    pub vocab_size: i32,
    pub rope_theta: f32,
    pub rope_traditional: bool,
    pub rope_scaling: RopeScaling,
    pub tie_word_embeddings: bool,
    pub max_position_embeddings: i32,
    /// Set for GGUF checkpoints: q/k rows come permuted for llama.cpp's rope.
    pub gguf: bool,
}

impl Config {
    /// From config.json.
    pub fn from_hf(c: &Value) -> Result<Config> {
        let hidden: i32 = field(c, "hidden_size")?;
        let heads: i32 = field(c, "num_attention_heads")?;
        one_of("hidden_act", c.get("hidden_act").and_then(Value::as_str), &["silu", "swish"])?;
        let head_dim = match c.get("head_dim").filter(|v| !v.is_null()) {
            Some(_) => field(c, "head_dim")?,
            None => implied_head_dim(hidden, heads)?,
        };
        Ok(Config {
            hidden_size: hidden,
            num_hidden_layers: field(c, "num_hidden_layers")?,
            intermediate_size: field(c, "intermediate_size")?,
            num_attention_heads: heads,
            num_key_value_heads: field_or(c, "num_key_value_heads", heads)?,
            head_dim,
            rms_norm_eps: field(c, "rms_norm_eps")?,
            vocab_size: field(c, "vocab_size")?,
            rope_theta: field_or(c, "rope_theta", 10000.0)?,
            rope_traditional: field_or(c, "rope_traditional", false)?,
            rope_scaling: rope_scaling(c)?,
            tie_word_embeddings: field_or(c, "tie_word_embeddings", true)?,
            max_position_embeddings: field_or(c, "max_position_embeddings", 0)?,
            gguf: false,
        })
    }

    /// From GGUF metadata (`llama.*` keys).
    pub fn from_gguf(c: &Value) -> Result<Config> {
        let k = |s: &str| format!("llama.{s}");
        let hidden: i32 = field(c, &k("embedding_length"))?;
        let heads: i32 = field(c, &k("attention.head_count"))?;
        let vocab: i32 = match field_or::<i32>(c, &k("vocab_size"), 0)? {
            0 => field(c, "tokenizer.ggml.tokens.count")?,
            v => v,
        };
        let head_dim = match c.get(k("attention.key_length")).filter(|v| !v.is_null()) {
            Some(_) => field(c, &k("attention.key_length"))?,
            None => implied_head_dim(hidden, heads).map_err(gguf_names)?,
        };
        Ok(Config {
            hidden_size: hidden,
            num_hidden_layers: field(c, &k("block_count"))?,
            intermediate_size: field(c, &k("feed_forward_length"))?,
            num_attention_heads: heads,
            num_key_value_heads: field_or(c, &k("attention.head_count_kv"), heads)?,
            head_dim,
            rms_norm_eps: field(c, &k("attention.layer_norm_rms_epsilon"))?,
            vocab_size: vocab,
            rope_theta: field_or(c, &k("rope.freq_base"), 10000.0)?,
            rope_traditional: false,
            rope_scaling: RopeScaling::None,
            // Decided at build time from whether `output.weight` exists.
            tie_word_embeddings: false,
            max_position_embeddings: field_or(c, &k("context_length"), 0)?,
            gguf: true,
        })
    }

    fn to_json(&self) -> Value {
        let scaling = match &self.rope_scaling {
            RopeScaling::None => Value::Null,
            RopeScaling::Linear { factor } => json!({"rope_type": "linear", "factor": factor}),
            RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position_embeddings } => {
                json!({
                    "rope_type": "llama3", "factor": factor, "low_freq_factor": low_freq_factor,
                    "high_freq_factor": high_freq_factor, "original_max_position_embeddings": original_max_position_embeddings,
                })
            }
        };
        json!({
            "hidden_size": self.hidden_size, "num_hidden_layers": self.num_hidden_layers,
            "intermediate_size": self.intermediate_size, "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads, "head_dim": self.head_dim,
            "rms_norm_eps": self.rms_norm_eps, "vocab_size": self.vocab_size, "rope_theta": self.rope_theta,
            "rope_traditional": self.rope_traditional, "rope_scaling": scaling,
            "tie_word_embeddings": self.tie_word_embeddings, "max_position_embeddings": self.max_position_embeddings,
            "gguf": self.gguf,
        })
    }

    /// Every field in range: a config that cannot describe a real model is
    /// refused naming the field, before anything is built.
    fn check(&self) -> Result<()> {
        DecoderFields {
            hidden: self.hidden_size,
            layers: self.num_hidden_layers,
            intermediate: self.intermediate_size,
            heads: self.num_attention_heads,
            kv_heads: self.num_key_value_heads,
            head_dim: self.head_dim,
            vocab: self.vocab_size,
        }
        .check()?;
        positive_finite("rope_theta", self.rope_theta)?;
        positive_finite("rms_norm_eps", self.rms_norm_eps)
    }

    fn from_plan(plan: &ModelPlan) -> Result<Config> {
        let c: Value = serde_json::from_str(plan.config.as_str()).map_err(|e| Error(format!("plan config: {e}")))?;
        let mut cfg = Config::from_hf(&c)?;
        cfg.gguf = field_or(&c, "gguf", false)?;
        Ok(cfg)
    }
}

/// The family registration.
pub struct LlamaFamily;

/// An error about a config field, in the GGUF metadata's own key names.
fn gguf_names(e: Error) -> Error {
    const KEYS: [(&str, &str); 8] = [
        ("hidden_size", "llama.embedding_length"),
        ("num_hidden_layers", "llama.block_count"),
        ("intermediate_size", "llama.feed_forward_length"),
        ("num_attention_heads", "llama.attention.head_count"),
        ("num_key_value_heads", "llama.attention.head_count_kv"),
        ("head_dim", "llama.attention.key_length"),
        ("rms_norm_eps", "llama.attention.layer_norm_rms_epsilon"),
        ("rope_theta", "llama.rope.freq_base"),
    ];
    let mut m = e.0.replace("config: field", "GGUF metadata");
    for (hf, key) in KEYS {
        m = m.replace(&format!("`{hf}`"), &format!("`{key}`"));
    }
    m = m.replace("`vocab_size`", "`llama.vocab_size` (or the tokenizer's token count)");
    Error(m)
}

/// GGUF tensor names → Hugging Face names.
fn gguf_name(name: &str) -> Option<String> {
    let (base, suffix) = name.rsplit_once('.')?;
    let mapped = match base {
        "token_embd" => "model.embed_tokens".to_string(),
        "output_norm" => "model.norm".to_string(),
        "output" => "lm_head".to_string(),
        "rope_freqs" => return None,
        _ => {
            let rest = base.strip_prefix("blk.")?;
            let (n, part) = rest.split_once('.')?;
            let hf = match part {
                "attn_norm" => "input_layernorm",
                "ffn_norm" => "post_attention_layernorm",
                "attn_q" => "self_attn.q_proj",
                "attn_k" => "self_attn.k_proj",
                "attn_v" => "self_attn.v_proj",
                "attn_output" => "self_attn.o_proj",
                "ffn_gate" => "mlp.gate_proj",
                "ffn_up" => "mlp.up_proj",
                "ffn_down" => "mlp.down_proj",
                _ => return None,
            };
            format!("model.layers.{n}.{hf}")
        }
    };
    Some(format!("{mapped}.{suffix}"))
}

/// Undoes llama.cpp's q/k row permutation (rows grouped per head as
/// [head, head_dim/2, 2] back to [head, 2, head_dim/2]).
fn unpermute(t: &Array, heads: i32) -> Result<Array> {
    let shape = t.shape().to_vec();
    let rows = shape[0];
    let mut s = vec![heads, rows / heads / 2, 2];
    s.extend_from_slice(&shape[1..]);
    t.reshape(&s)?.swapaxes(1, 2)?.reshape(&shape)
}

impl FamilySpec for LlamaFamily {
    fn name(&self) -> &'static str {
        "llama"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["llama", "mistral"]
    }

    fn plan(&self, config: &Value) -> Result<ModelPlan> {
        let gguf = config.get("format").and_then(Value::as_str) == Some("gguf");
        let cfg = if gguf { Config::from_gguf(config)? } else { Config::from_hf(config)? };
        cfg.check().map_err(|e| if gguf { gguf_names(e) } else { e })?;
        Ok(ModelPlan {
            family: "llama".into(),
            model_type: field_or::<String>(config, "model_type", "llama".into())?.into(),
            config: cfg.to_json().to_string().into(),
            caches: (0..cfg.num_hidden_layers).map(|_| CacheKind::Full).collect(),
            eos_ids: eos_ids(config).into(),
            vocab_size: cfg.vocab_size as u32,
            hidden_size: cfg.hidden_size as u32,
            max_position_embeddings: plugin_api::config::context_length(cfg.max_position_embeddings, &cfg.rope_scaling),
            modalities: vec!["text".into()].into(),
            dtype: field_or::<String>(config, "torch_dtype", "bfloat16".into())?.into(),
            add_bos: abi_stable::std_types::ROption::RNone,
        })
    }

    fn rewrite(&self, plan: &ModelPlan, name: &str, t: Array) -> Result<Vec<(String, Array)>> {
        if name.contains("self_attn.rotary_emb.inv_freq") {
            return Ok(vec![]);
        }
        let cfg = Config::from_plan(plan)?;
        if !cfg.gguf {
            return Ok(vec![(name.to_string(), t)]);
        }
        let Some(hf) = gguf_name(name) else { return Ok(vec![]) };
        let t = if hf.contains("self_attn.q_proj.") {
            unpermute(&t, cfg.num_attention_heads)?
        } else if hf.contains("self_attn.k_proj.") {
            unpermute(&t, cfg.num_key_value_heads)?
        } else {
            t
        };
        Ok(vec![(hf, t)])
    }

    /// One matmul for q/k/v and one for gate/up per layer.
    fn fusions(&self, plan: &ModelPlan) -> Vec<plugin_api::Fusion> {
        plugin_api::layers::decoder_fusions(plan)
    }

    /// A separate checkpoint of this family drafts as a small LM (`--draft-model`).
    fn build_drafter(
        &self,
        plan: &ModelPlan,
        w: &dyn Weights,
        target_plan: &ModelPlan,
        _target: &dyn Weights,
    ) -> Result<Option<Box<dyn plugin_api::family::DraftForward>>> {
        plugin_api::layers::LmDrafter::for_separate_checkpoint(plan, target_plan, || self.build(plan, w))
    }

    fn build(&self, plan: &ModelPlan, w: &dyn Weights) -> Result<Box<dyn ModelForward>> {
        let cfg = Config::from_plan(plan)?;
        let rope = Rope::new(cfg.head_dim, cfg.rope_theta, cfg.rope_traditional, &cfg.rope_scaling)?;
        // GGUF files omit `output.weight` when the head is tied.
        let tied = cfg.tie_word_embeddings || (cfg.gguf && w.get("lm_head.weight").is_none());
        let shape = DecoderShape {
            vocab: cfg.vocab_size,
            layers: cfg.num_hidden_layers,
            intermediate: cfg.intermediate_size,
            rms_norm_eps: cfg.rms_norm_eps,
            attention: AttentionShape {
                hidden: cfg.hidden_size,
                n_heads: cfg.num_attention_heads,
                n_kv_heads: cfg.num_key_value_heads,
                head_dim: cfg.head_dim,
                qk_norm_eps: None,
            },
            tied,
        };
        Ok(Box::new(DecoderLm::load(w, &shape, &rope)?))
    }
}

#[cfg(feature = "export")]
plugin_api::export_plugin!("famlx-plugin-llama", [LlamaFamily]);
