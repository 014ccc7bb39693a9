//! Cache-aware layers shared by families: grouped-query attention over a
//! host cache slot, and the config helpers every family uses.

use crate::family::Caches;
use crate::AttnOptions;
use mlx::fast::RopeOffset;
use mlx::nn::{Linear, RmsNorm, Rope, RopeScaling, Weights};
use mlx::{Array, Error, Result};
use serde_json::Value;

/// Grouped-query self-attention with rotary positions, optional per-head
/// q/k RMS norms (Qwen3, Gemma), attending through a host cache slot.
#[derive(Debug, Clone)]
pub struct Attention {
    /// q projection
    pub q: Linear,
    /// k projection
    pub k: Linear,
    /// v projection
    pub v: Linear,
    /// output projection
    pub o: Linear,
    /// per-head norm of queries
    pub q_norm: Option<RmsNorm>,
    /// per-head norm of keys
    pub k_norm: Option<RmsNorm>,
    /// query heads
    pub n_heads: i32,
    /// key/value heads
    pub n_kv_heads: i32,
    /// score scale
    pub scale: f32,
    /// rotary embedding
    pub rope: Rope,
    /// q, k and v stacked: one matmul instead of three
    pub qkv: Option<Linear>,
}

impl Attention {
    /// Loads `{prefix}.{q,k,v,o}_proj` and, when `qk_norm_eps` is given,
    /// `{prefix}.{q,k}_norm`.
    pub fn load(
        w: &dyn Weights,
        prefix: &str,
        n_heads: i32,
        n_kv_heads: i32,
        head_dim: i32,
        rope: Rope,
        qk_norm_eps: Option<f32>,
    ) -> Result<Self> {
        let norm = |n: &str| qk_norm_eps.map(|eps| RmsNorm::load(w, &format!("{prefix}.{n}"), eps)).transpose();
        let q = Linear::load(w, &format!("{prefix}.q_proj"))?;
        let k = Linear::load(w, &format!("{prefix}.k_proj"))?;
        let v = Linear::load(w, &format!("{prefix}.v_proj"))?;
        let qkv = Linear::concat(&[&q, &k, &v])?;
        Ok(Attention {
            q,
            k,
            v,
            qkv,
            o: Linear::load(w, &format!("{prefix}.o_proj"))?,
            q_norm: norm("q_norm")?,
            k_norm: norm("k_norm")?,
            n_heads,
            n_kv_heads,
            scale: (head_dim as f32).powf(-0.5),
            rope,
        })
    }

    fn heads(x: Array, b: i32, l: i32, h: i32, norm: &Option<RmsNorm>) -> Result<Array> {
        let x = x.reshape(&[b, l, h, -1])?;
        let x = match norm {
            Some(n) => n.forward(&x)?,
            None => x,
        };
        x.transpose(&[0, 2, 1, 3])
    }

    /// `x` is `[B, L, hidden]`; attends through cache `slot`.
    pub fn forward(&self, x: &Array, caches: &mut Caches<'_>, slot: usize) -> Result<Array> {
        let (b, l) = (x.dim(0), x.dim(1));
        let (q, k, v) = match &self.qkv {
            Some(qkv) => {
                let (nq, nk) = (self.q.out_features(), self.k.out_features());
                let mut p = qkv.forward(x)?.split_at(&[nq, nq + nk], -1)?;
                let v = p.pop().expect("3 parts");
                let k = p.pop().expect("3 parts");
                (p.pop().expect("3 parts"), k, v)
            }
            None => (self.q.forward(x)?, self.k.forward(x)?, self.v.forward(x)?),
        };
        let q = Self::heads(q, b, l, self.n_heads, &self.q_norm)?;
        let k = Self::heads(k, b, l, self.n_kv_heads, &self.k_norm)?;
        let v = Self::heads(v, b, l, self.n_kv_heads, &None)?;
        let off = caches.offset(slot)? as i32;
        let q = self.rope.forward(&q, RopeOffset::Int(off))?;
        let k = self.rope.forward(&k, RopeOffset::Int(off))?;
        let o = caches.attend(slot, q, k, v, AttnOptions::causal(self.scale))?;
        self.o.forward(&o.transpose(&[0, 2, 1, 3])?.reshape(&[b, l, -1])?)
    }
}

/// Reads a config field, naming it in the error.
pub fn field<T: serde::de::DeserializeOwned>(cfg: &Value, name: &str) -> Result<T> {
    let v = cfg.get(name).ok_or_else(|| Error(format!("config: missing field `{name}`")))?;
    serde_json::from_value(v.clone()).map_err(|e| Error(format!("config: field `{name}`: {e}")))
}

/// Reads an optional config field.
pub fn field_or<T: serde::de::DeserializeOwned>(cfg: &Value, name: &str, default: T) -> Result<T> {
    match cfg.get(name) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => serde_json::from_value(v.clone()).map_err(|e| Error(format!("config: field `{name}`: {e}"))),
    }
}

/// `eos_token_id` as an int or a list.
pub fn eos_ids(cfg: &Value) -> Vec<u32> {
    match cfg.get("eos_token_id") {
        Some(Value::Number(n)) => n.as_u64().map(|n| vec![n as u32]).unwrap_or_default(),
        Some(Value::Array(a)) => a.iter().filter_map(|v| v.as_u64().map(|n| n as u32)).collect(),
        _ => Vec::new(),
    }
}

/// Parses a `rope_scaling` entry (`rope_type`/`type`: default, linear, llama3).
pub fn rope_scaling(cfg: &Value) -> Result<RopeScaling> {
    let Some(s) = cfg.get("rope_scaling").filter(|v| !v.is_null()) else {
        return Ok(RopeScaling::None);
    };
    let kind = s.get("rope_type").or_else(|| s.get("type")).and_then(Value::as_str).unwrap_or("default");
    let f = |k: &str, d: f32| s.get(k).and_then(Value::as_f64).map(|v| v as f32).unwrap_or(d);
    Ok(match kind {
        "default" => RopeScaling::None,
        "linear" => RopeScaling::Linear { factor: field::<f32>(s, "factor")? },
        "llama3" => RopeScaling::Llama3 {
            factor: field::<f32>(s, "factor").map_err(|e| Error(format!("rope_scaling: {e}")))?,
            low_freq_factor: f("low_freq_factor", 1.0),
            high_freq_factor: f("high_freq_factor", 4.0),
            original_max_position_embeddings: f("original_max_position_embeddings", 8192.0),
        },
        other => return Err(Error(format!("config: rope_scaling type `{other}` is not supported"))),
    })
}

/// The pre-norm decoder block of Llama-style models:
/// `h = x + attn(norm1(x)); out = h + mlp(norm2(h))`.
#[derive(Debug, Clone)]
pub struct PreNormBlock {
    /// self-attention
    pub attn: Attention,
    /// gated MLP
    pub mlp: mlx::nn::GatedMlp,
    /// norm before attention
    pub input_norm: RmsNorm,
    /// norm before the MLP
    pub post_attn_norm: RmsNorm,
}

impl PreNormBlock {
    /// Runs the block through cache `slot`.
    pub fn forward(&self, x: &Array, caches: &mut Caches<'_>, slot: usize) -> Result<Array> {
        let h = x.add(&self.attn.forward(&self.input_norm.forward(x)?, caches, slot)?)?;
        h.add(&self.mlp.forward(&self.post_attn_norm.forward(&h)?)?)
    }
}

/// A decoder-only language model: embedding, blocks (one cache slot each),
/// final norm, and an untied head or the tied embedding.
#[derive(Debug, Clone)]
pub struct DecoderLm {
    /// token embedding
    pub embed: mlx::nn::Embedding,
    /// blocks
    pub blocks: Vec<PreNormBlock>,
    /// final norm
    pub norm: RmsNorm,
    /// untied output head (`None`: tied to the embedding)
    pub lm_head: Option<Linear>,
}

/// Applies the output `head` to the final (normed) hidden state where logits
/// are wanted: nowhere for prefill chunks, only the last position for
/// generation (the head is the largest matmul: skip it for the rest), or
/// every position.
pub fn lm_output(
    h: Array,
    wanted: crate::LogitsWanted,
    want_hidden: bool,
    head: impl Fn(&Array) -> Result<Array>,
) -> Result<crate::family::Output> {
    use crate::LogitsWanted;
    let logits = match wanted {
        LogitsWanted::None => None,
        LogitsWanted::Last => Some(head(&h.slice_axis(1, -1, h.dim(1))?)?),
        LogitsWanted::All => Some(head(&h)?),
    };
    Ok(crate::family::Output { logits, hidden: want_hidden.then_some(h) })
}

impl crate::family::ModelForward for DecoderLm {
    fn forward(&mut self, input: &crate::family::Input, caches: &mut Caches<'_>) -> Result<crate::family::Output> {
        let mut h = match &input.embeddings {
            Some(e) => e.clone(),
            None => self.embed.forward(&input.tokens)?,
        };
        for (i, b) in self.blocks.iter().enumerate() {
            h = b.forward(&h, caches, i)?;
        }
        let h = self.norm.forward(&h)?;
        lm_output(h, input.logits, input.want_hidden, |x| match &self.lm_head {
            Some(l) => l.forward(x),
            None => self.embed.as_linear(x),
        })
    }
}

/// A small language model of the target's vocabulary drafting for it (what
/// mlx-lm's `--draft-model` does): it ignores the target's hidden states and
/// runs over its own caches. By the drafter protocol it is fed the token
/// after each target position, so it never sees the prompt's first token;
/// that only lowers acceptance, never changes the output.
pub struct LmDrafter {
    model: Box<dyn crate::family::ModelForward>,
    kinds: Vec<crate::CacheKind>,
}

impl LmDrafter {
    /// A drafter from a model built for the draft checkpoint and its plan's caches.
    pub fn new(model: Box<dyn crate::family::ModelForward>, plan: &crate::ModelPlan) -> Self {
        LmDrafter { model, kinds: plan.caches.iter().cloned().collect() }
    }

    /// Builds one with `build` when `plan` is not the target's own (a
    /// separate draft checkpoint); `None` for the target itself, which has
    /// no draft head.
    pub fn for_separate_checkpoint(
        plan: &crate::ModelPlan,
        target_plan: &crate::ModelPlan,
        build: impl FnOnce() -> Result<Box<dyn crate::family::ModelForward>>,
    ) -> Result<Option<Box<dyn crate::family::DraftForward>>> {
        // The host hands the same plan twice when asking for a self-drafter.
        if std::ptr::eq(plan, target_plan) {
            return Ok(None);
        }
        Ok(Some(Box::new(LmDrafter::new(build()?, plan))))
    }
}

impl crate::family::DraftForward for LmDrafter {
    fn cache_kinds(&self) -> Vec<crate::CacheKind> {
        self.kinds.clone()
    }
    fn step(
        &mut self,
        _hidden: &Array,
        tokens: &Array,
        _target: &mut Caches<'_>,
        own: &mut Caches<'_>,
    ) -> Result<(Array, Array)> {
        let input = crate::family::Input {
            tokens: tokens.clone(),
            embeddings: None,
            logits: crate::LogitsWanted::Last,
            want_hidden: false,
        };
        let out = self.model.forward(&input, own)?;
        let logits = out.logits.ok_or_else(|| Error::msg("draft model returned no logits"))?;
        // No hidden state to chain: the next step only needs the token.
        Ok((logits, mlx::zeros(&[1, 1, 1], mlx::Dtype::F32)?))
    }
}
