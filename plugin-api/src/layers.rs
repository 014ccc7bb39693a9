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
    /// q, k and v projections
    pub proj: Qkv,
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
    /// The q and k norms as one [`HeadNorms`] over one token's fused heads
    /// (set by [`Attention::load`] when both norms are present).
    pub head_norms: Option<HeadNorms>,
}

/// Per-head RMS norms of one token's fused q/k/v heads in one weightless
/// norm and one multiply, instead of a weighted norm per kind of head.
/// Bit-equal to the separate norms: MLX's weighted norm also rounds the
/// normed value to the activation dtype before scaling it.
#[derive(Debug, Clone)]
pub struct HeadNorms {
    /// `[1, hq + 2·hkv, 1, d]` (one token's heads, so the multiply needs no
    /// broadcast node): the q-norm scale on the query heads' rows, the
    /// k-norm scale on the key heads' and ones on the value heads'.
    rows: Array,
    eps: f32,
}

impl HeadNorms {
    /// From the q and k norms; the value heads are scaled by one (normed
    /// without a weight: gemma4's v norm; heads nobody reads: qwen3's).
    /// `None` when the two norms differ in epsilon, dtype or width: the
    /// layer then keeps its separate norms.
    pub fn new(q: &RmsNorm, k: &RmsNorm, hq: i32, hkv: i32) -> Result<Option<HeadNorms>> {
        let d = q.weight.dim(-1);
        let dt = q.weight.dtype();
        if q.eps != k.eps || k.weight.dtype() != dt || k.weight.dim(-1) != d {
            return Ok(None);
        }
        let qr = q.weight.reshape(&[1, d])?.broadcast_to(&[hq, d])?;
        let kr = k.weight.reshape(&[1, d])?.broadcast_to(&[hkv, d])?;
        let vr = mlx::ones(&[hkv, d], dt)?;
        let rows = mlx::concatenate(&[&qr, &kr, &vr], 0)?.reshape(&[1, hq + 2 * hkv, 1, d])?;
        mlx::eval(&[&rows])?;
        Ok(Some(HeadNorms { rows, eps: q.eps }))
    }

    /// Whether the result is bit-equal for activations of dtype `dt` (the
    /// scales must be stored in it, or the weighted norm would not round).
    pub fn fits(&self, dt: mlx::Dtype) -> bool {
        self.rows.dtype() == dt
    }

    /// Norms every head of `y` (`[B, hq + 2·hkv, 1, d]`).
    pub fn apply(&self, y: &Array) -> Result<Array> {
        mlx::fast::rms_norm(y, None, self.eps)?.mul(&self.rows)
    }
}

/// One token's fused heads `[B, hq + 2·hkv, 1, d]` roped in one call: the
/// query and key heads (the value heads' rotated copy is dropped, so the
/// caller takes v from the unrotated heads).
pub fn rope_one_token(rope: &Rope, heads: &Array, off: RopeOffset, hq: i32, hkv: i32) -> Result<(Array, Array)> {
    let mut r = rope.forward(heads, off)?.split_at(&[hq, hq + hkv], 1)?;
    r.truncate(2);
    let k = r.pop().expect("3 parts");
    Ok((r.pop().expect("3 parts"), k))
}

/// The input projections of an [`Attention`]: three matrices, or one whose
/// output is q, k and v side by side (one matmul instead of three).
#[derive(Debug, Clone)]
pub enum Qkv {
    /// `q_proj`, `k_proj`, `v_proj`.
    Split {
        /// q projection
        q: Linear,
        /// k projection
        k: Linear,
        /// v projection
        v: Linear,
    },
    /// `qkv_proj` (fused by the host at load, see [`qkv_fusion`]).
    Fused(Linear),
}

/// The [`crate::Fusion`] that stacks `{prefix}.{q,k,v}_proj` into `{prefix}.qkv_proj`.
pub fn qkv_fusion(prefix: &str) -> crate::Fusion {
    fusion(&format!("{prefix}.qkv_proj"), &["q_proj", "k_proj", "v_proj"].map(|p| format!("{prefix}.{p}")))
}

/// The [`crate::Fusion`] that stacks `{prefix}.{gate,up}_proj` into `{prefix}.gate_up_proj`.
pub fn gate_up_fusion(prefix: &str) -> crate::Fusion {
    fusion(&format!("{prefix}.gate_up_proj"), &["gate_proj", "up_proj"].map(|p| format!("{prefix}.{p}")))
}

/// q/k/v and gate/up fusions of every `model.layers.{i}` of a plain decoder
/// (one cache slot per layer), as llama and qwen3 name them.
pub fn decoder_fusions(plan: &crate::ModelPlan) -> Vec<crate::Fusion> {
    (0..plan.caches.len())
        .flat_map(|i| {
            let p = format!("model.layers.{i}");
            [qkv_fusion(&format!("{p}.self_attn")), gate_up_fusion(&format!("{p}.mlp"))]
        })
        .collect()
}

fn fusion(into: &str, parts: &[String]) -> crate::Fusion {
    crate::Fusion { into: into.into(), parts: parts.iter().map(|p| p.as_str().into()).collect() }
}

/// The shape of an [`Attention`] layer, from the model's config.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionShape {
    /// Width of the residual stream (the projections' input, o's output).
    pub hidden: i32,
    /// Query heads.
    pub n_heads: i32,
    /// Key/value heads.
    pub n_kv_heads: i32,
    /// Features per head.
    pub head_dim: i32,
    /// Epsilon of the per-head q/k RMS norms (Qwen3, Gemma); `None`: no such norms.
    pub qk_norm_eps: Option<f32>,
}

impl Attention {
    /// Loads `{prefix}.qkv_proj` (or `{q,k,v}_proj`), `o_proj` and, when
    /// the shape has a q/k norm epsilon, `{prefix}.{q,k}_norm`, each checked
    /// against `shape`. The score scale is `1/√head_dim`.
    pub fn load(w: &dyn Weights, prefix: &str, shape: &AttentionShape, rope: Rope) -> Result<Self> {
        let AttentionShape { hidden, n_heads, n_kv_heads, head_dim, qk_norm_eps } = *shape;
        let d = head_dim;
        let norm = |n: &str| qk_norm_eps.map(|eps| RmsNorm::load(w, &format!("{prefix}.{n}"), d, eps)).transpose();
        let lin = |n: &str, i: i32, o: i32| Linear::load(w, &format!("{prefix}.{n}"), i, o);
        let proj = if w.get(&format!("{prefix}.qkv_proj.weight")).is_some() {
            Qkv::Fused(lin("qkv_proj", hidden, (n_heads + 2 * n_kv_heads) * d)?)
        } else {
            Qkv::Split {
                q: lin("q_proj", hidden, n_heads * d)?,
                k: lin("k_proj", hidden, n_kv_heads * d)?,
                v: lin("v_proj", hidden, n_kv_heads * d)?,
            }
        };
        let (q_norm, k_norm) = (norm("q_norm")?, norm("k_norm")?);
        let head_norms = match (&proj, &q_norm, &k_norm) {
            (Qkv::Fused(_), Some(qn), Some(kn)) => HeadNorms::new(qn, kn, n_heads, n_kv_heads)?,
            _ => None,
        };
        Ok(Attention {
            proj,
            o: lin("o_proj", n_heads * d, hidden)?,
            q_norm,
            k_norm,
            n_heads,
            n_kv_heads,
            scale: (head_dim as f32).powf(-0.5),
            rope,
            head_norms,
        })
    }

    /// `[B, L, h·d]` → `[B, h, L, d]`, normed per head when `norm` is given.
    /// For one token the layouts coincide, so a reshape does it without a
    /// transpose node (decode is bound by host time per graph node).
    fn heads(x: Array, b: i32, l: i32, h: i32, norm: &Option<RmsNorm>) -> Result<Array> {
        let x = if l == 1 { x.reshape(&[b, h, 1, -1])? } else { x.reshape(&[b, l, h, -1])? };
        let x = match norm {
            Some(n) => n.forward(&x)?,
            None => x,
        };
        if l == 1 {
            Ok(x)
        } else {
            x.transpose(&[0, 2, 1, 3])
        }
    }

    /// `x` is `[B, L, hidden]`; attends through cache `slot`.
    pub fn forward(&self, x: &Array, caches: &mut Caches<'_>, slot: usize) -> Result<Array> {
        let (b, l) = (x.dim(0), x.dim(1));
        let off = RopeOffset::Int(caches.offset(slot)? as i32);
        let (hq, hkv) = (self.n_heads, self.n_kv_heads);
        let no_norms = self.q_norm.is_none() && self.k_norm.is_none();
        let (q, k, v) = match &self.proj {
            Qkv::Fused(p) if l == 1 && (no_norms || self.head_norms.as_ref().is_some_and(|n| n.fits(x.dtype()))) => {
                // One token: every head (normed at once, with q/k norms) in
                // one rope call, no transpose; v from the unnormed heads.
                let y = p.forward(x)?.reshape(&[b, hq + 2 * hkv, 1, -1])?;
                let (q, k) = match &self.head_norms {
                    Some(n) => rope_one_token(&self.rope, &n.apply(&y)?, off, hq, hkv)?,
                    None => rope_one_token(&self.rope, &y, off, hq, hkv)?,
                };
                (q, k, y.slice_axis(1, hq + hkv, hq + 2 * hkv)?)
            }
            Qkv::Fused(p) if no_norms => {
                // Heads of q and k side by side: one rope call for both.
                let y = p.forward(x)?.reshape(&[b, l, hq + 2 * hkv, -1])?.transpose(&[0, 2, 1, 3])?;
                let qk = self.rope.forward(&y.slice_axis(1, 0, hq + hkv)?, off)?;
                let mut qk = qk.split_at(&[hq], 1)?;
                let k = qk.pop().expect("2 parts");
                (qk.pop().expect("2 parts"), k, y.slice_axis(1, hq + hkv, hq + 2 * hkv)?)
            }
            proj => {
                let (q, k, v) = match proj {
                    Qkv::Fused(p) => {
                        let d = p.out_features() / (hq + 2 * hkv);
                        let mut p = p.forward(x)?.split_at(&[hq * d, (hq + hkv) * d], -1)?;
                        let v = p.pop().expect("3 parts");
                        let k = p.pop().expect("3 parts");
                        (p.pop().expect("3 parts"), k, v)
                    }
                    Qkv::Split { q, k, v } => (q.forward(x)?, k.forward(x)?, v.forward(x)?),
                };
                let q = self.rope.forward(&Self::heads(q, b, l, hq, &self.q_norm)?, off)?;
                let k = self.rope.forward(&Self::heads(k, b, l, hkv, &self.k_norm)?, off)?;
                (q, k, Self::heads(v, b, l, hkv, &None)?)
            }
        };
        let o = caches.attend(slot, q, k, v, AttnOptions::causal(self.scale))?;
        // `[B, h, L, d]` → `[B, L, h·d]`; for one token a reshape is enough.
        let o = if l == 1 { o.reshape(&[b, 1, -1])? } else { o.transpose(&[0, 2, 1, 3])?.reshape(&[b, l, -1])? };
        self.o.forward(&o)
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

/// The shape of a [`DecoderLm`], from the model's config.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecoderShape {
    /// Vocabulary (embedding rows, logits).
    pub vocab: i32,
    /// Decoder blocks.
    pub layers: i32,
    /// Width of the MLPs.
    pub intermediate: i32,
    /// Epsilon of the blocks' and the final RMS norms.
    pub rms_norm_eps: f32,
    /// The attention of every block (its `hidden` is the model's width).
    pub attention: AttentionShape,
    /// Output head tied to the embedding (no `lm_head` tensor).
    pub tied: bool,
}

impl DecoderLm {
    /// Loads a Llama-style decoder under Hugging Face's names
    /// (`model.embed_tokens`, `model.layers.{i}.{self_attn,mlp,input_layernorm,
    /// post_attention_layernorm}`, `model.norm`, `lm_head`), every tensor
    /// checked against `shape`; every block's attention ropes with `rope`.
    pub fn load(w: &dyn Weights, shape: &DecoderShape, rope: &Rope) -> Result<DecoderLm> {
        let (h, eps) = (shape.attention.hidden, shape.rms_norm_eps);
        let blocks = (0..shape.layers)
            .map(|i| {
                let p = format!("model.layers.{i}");
                Ok(PreNormBlock {
                    attn: Attention::load(w, &format!("{p}.self_attn"), &shape.attention, rope.clone())?,
                    mlp: mlx::nn::GatedMlp::load(w, &format!("{p}.mlp"), h, shape.intermediate)?,
                    input_norm: RmsNorm::load(w, &format!("{p}.input_layernorm"), h, eps)?,
                    post_attn_norm: RmsNorm::load(w, &format!("{p}.post_attention_layernorm"), h, eps)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(DecoderLm {
            embed: mlx::nn::Embedding::load(w, "model.embed_tokens", shape.vocab, h)?,
            blocks,
            norm: RmsNorm::load(w, "model.norm", h, eps)?,
            lm_head: if shape.tied { None } else { Some(Linear::load(w, "lm_head", h, shape.vocab)?) },
        })
    }
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
/// runs over its own caches, reading the prompt's first token in `begin`
/// and every later one from the steps, so it sees the whole sequence.
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
    fn begin(&mut self, first_token: u32, own: &mut Caches<'_>) -> Result<u32> {
        let input = crate::family::Input {
            tokens: Array::from_slice(&[first_token as i32], &[1, 1])?,
            embeddings: None,
            logits: crate::LogitsWanted::None,
            want_hidden: false,
        };
        self.model.forward(&input, own)?;
        Ok(1)
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
