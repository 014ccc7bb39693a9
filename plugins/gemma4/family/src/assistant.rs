//! The Gemma 4 assistant drafter (`gemma4_assistant` checkpoints, passed
//! with `--draft-model`): a few Gemma 4 decoder layers with no K/V of their
//! own that attend over the TARGET's K/V.
//!
//! One step (the host's [`plugin_api::Drafter`] protocol, last position
//! only): `pre_projection(concat(target_embed(token) * √H_target, hidden))`,
//! the layers (queries roped at the target's cache offset, which stays put
//! for every step of a round; sliding layers read the target's last sliding
//! cache, full layers its last full one), the final norm, then
//! `post_projection` (the hidden state chained into the next step) and the
//! logits: the tied embedding (no soft-capping), an untied `lm_head`, or for
//! E2B/E4B assistants (`use_ordered_embeddings`) the centroid-routed sparse
//! head: the top `centroid_intermediate_top_k` of `num_centroids` clusters
//! are scored densely and every other token gets `min(scored) - 1`.
//!
//! `hidden` is what the target's forward returns with `want_hidden`: the
//! last layer's output AFTER the final norm. That is what the assistant was
//! trained on (HF's `last_hidden_state`; mlx-vlm computes the verify hidden
//! without the norm and applies it in `speculative_draft_hidden`).
//!
//! Masks: full-attention layers see every cached target position. Sliding
//! layers ask the cache for its causal window (`AttnMask::Causal`); mlx-vlm's
//! reference mask lets the query at position p see the target's sliding K/V
//! at (p - W, p), i.e. the newest W - 1 positions once the window is full.
//! The host's rotating cache applies exactly that in `attend_cached` (only
//! the cache knows its ring order, so the mask belongs to the host).

use crate::config::Config;
use crate::layer::Gemma4Layer;
use mlx::nn::{Embedding, Kind, Linear, OutputHead, RmsNorm, Weights};
use mlx::{concatenate, full, Array, Dtype, Error, Result};
use plugin_api::config::{eos_ids, field_or, in_range, limits, nullable, parse};
use plugin_api::{AttnMask, CacheKind, ModelPlan};
use plugin_api::{Caches, Drafter};
use serde::Deserialize;
use serde_json::{json, Value};

/// The model type this module serves.
pub const MODEL_TYPE: &str = "gemma4_assistant";

plugin_api::config_defaults! {
    yes / yes_or_null: bool = true;
    backbone / backbone_or_null: i32 = 1536;
    centroids / centroids_or_null: i32 = 2048;
    top_k / top_k_or_null: i32 = 32;
}

/// What the top level of an assistant's config.json says beside
/// `text_config`; absent (or null) fields take HF's defaults.
#[derive(Debug, Clone, Deserialize)]
struct Top {
    #[serde(default = "backbone", deserialize_with = "backbone_or_null")]
    backbone_hidden_size: i32,
    #[serde(default, deserialize_with = "nullable")]
    use_ordered_embeddings: bool,
    #[serde(default = "centroids", deserialize_with = "centroids_or_null")]
    num_centroids: i32,
    #[serde(default = "top_k", deserialize_with = "top_k_or_null")]
    centroid_intermediate_top_k: i32,
    #[serde(default = "yes", deserialize_with = "yes_or_null")]
    tie_word_embeddings: bool,
}

/// The assistant's config.json.
#[derive(Debug, Clone)]
pub struct AssistantConfig {
    /// The drafter's own layers (`text_config`; every layer KV-shared).
    pub text: Config,
    /// Hidden size of the target the assistant was trained with.
    pub backbone_hidden_size: i32,
    /// The centroid-routed sparse output head (E2B/E4B assistants).
    pub use_ordered_embeddings: bool,
    /// Token clusters of the sparse head.
    pub num_centroids: i32,
    /// Clusters scored per position.
    pub centroid_intermediate_top_k: i32,
    /// Output head tied to the drafter's embedding.
    pub tie_word_embeddings: bool,
}

impl AssistantConfig {
    /// From config.json.
    pub fn parse(c: &Value) -> Result<AssistantConfig> {
        let mut c = c.clone();
        let t = c
            .get_mut("text_config")
            .filter(|t| t.is_object())
            .ok_or_else(|| Error::msg("config: gemma4_assistant needs a text_config object"))?;
        // As HF's Gemma4AssistantConfig: unset/0 means every layer reads shared K/V.
        let n = t.get("num_hidden_layers").cloned().unwrap_or(json!(35));
        if t.get("num_kv_shared_layers").and_then(Value::as_i64).unwrap_or(0) == 0 {
            t["num_kv_shared_layers"] = n;
        }
        let text = Config::parse(&c)?;
        if text.num_kv_shared_layers != text.num_hidden_layers {
            return Err(Error::msg(format!(
                "config: text_config.num_kv_shared_layers is {}, but every layer of a gemma4_assistant reads the target's K/V ({})",
                text.num_kv_shared_layers, text.num_hidden_layers
            )));
        }
        if text.enable_moe_block || text.hidden_size_per_layer_input != 0 {
            return Err(Error::msg(
                "config: a gemma4_assistant has no MoE block and no per-layer inputs (text_config.enable_moe_block / hidden_size_per_layer_input)",
            ));
        }
        let top: Top = parse(&c)?;
        let cfg = AssistantConfig {
            text,
            backbone_hidden_size: top.backbone_hidden_size,
            use_ordered_embeddings: top.use_ordered_embeddings,
            num_centroids: top.num_centroids,
            centroid_intermediate_top_k: top.centroid_intermediate_top_k,
            tie_word_embeddings: top.tie_word_embeddings,
        };
        in_range("backbone_hidden_size", cfg.backbone_hidden_size, limits::HIDDEN)?;
        if cfg.use_ordered_embeddings
            && (cfg.num_centroids < 1
                || cfg.text.vocab_size % cfg.num_centroids != 0
                || !(1..=cfg.num_centroids).contains(&cfg.centroid_intermediate_top_k))
        {
            return Err(Error::msg(format!(
                "config: use_ordered_embeddings needs num_centroids dividing the vocabulary ({}) and centroid_intermediate_top_k in 1..=num_centroids (got {} and {})",
                cfg.text.vocab_size, cfg.num_centroids, cfg.centroid_intermediate_top_k
            )));
        }
        Ok(cfg)
    }
}

/// The plan of an assistant checkpoint: no caches of its own (it reads the
/// target's), no BOS convention (it never sees a prompt).
pub fn plan(cfg: &AssistantConfig, config: &Value) -> Result<ModelPlan> {
    let mut stored = config.clone();
    if let Some(o) = stored.as_object_mut() {
        o.retain(|k, _| !k.starts_with("quantization"));
    }
    let dtype = field_or::<Option<String>>(config, "torch_dtype", None)?
        .or(field_or::<Option<String>>(&config["text_config"], "torch_dtype", None)?)
        .unwrap_or_else(|| "bfloat16".into());
    Ok(ModelPlan::text("gemma4", MODEL_TYPE, &stored, Vec::new(), cfg.text.vocab_size, cfg.text.hidden_size)?
        .with_eos(eos_ids(config))
        .with_context(cfg.text.max_position_embeddings.max(0) as u32)
        .with_dtype(&dtype))
}

/// Tensor names of an assistant checkpoint (HF and mlx-vlm name them alike).
pub fn rewrite(cfg: &AssistantConfig, name: &str, t: Array) -> Result<Vec<(String, Array)>> {
    if name == "lm_head.weight" && cfg.tie_word_embeddings {
        return Ok(vec![]);
    }
    if name == "masked_embedding.token_ordering" {
        // int64 on disk; int32 indexes the same vocabulary.
        return Ok(vec![(name.to_string(), t.astype(Dtype::I32)?)]);
    }
    Ok(vec![(name.to_string(), t)])
}

/// The output head.
enum Head {
    /// Tied to the drafter's embedding, or its own `lm_head`.
    Dense(OutputHead),
    /// The centroid-routed sparse head.
    Masked { centroids: Linear, ordering: Array, embed: Embedding, top_k: i32, vocab: i32 },
}

impl Head {
    fn forward(&self, h: &Array) -> Result<Array> {
        match self {
            Head::Dense(head) => head.forward(h),
            Head::Masked { centroids, ordering, embed, top_k, vocab } => {
                let (b, l, d) = (h.dim(0), h.dim(1), h.dim(2));
                let top = centroids.forward(h)?.top_k_indices(*top_k)?; // [B, L, k]
                let ids = ordering.take(&top, 0)?.reshape(&[b, l, -1])?; // [B, L, k * V/C]
                let n = ids.dim(-1);
                let rows = embed.forward(&ids.reshape(&[-1])?)?.reshape(&[b, l, n, d])?;
                let scored = h.expand_dims(&[-2])?.matmul(&rows.swapaxes(-1, -2)?)?.squeeze(&[-2])?; // [B, L, n]
                                                                                                     // Every token outside the chosen clusters sits just below the lowest scored one.
                let floor = scored.min_all()?.astype(Dtype::F32)?.sub_s(1.0)?;
                full(&[b, l, *vocab], &floor, h.dtype())?.put_along_axis(&ids, &scored, -1)
            }
        }
    }
}

/// One drafter layer and the target cache slot it reads.
struct DraftLayer {
    layer: Gemma4Layer,
    slot: usize,
    mask: AttnMask,
}

/// The assistant drafter, bound to its target.
pub struct Gemma4Assistant {
    target_embed: Embedding,
    target_embed_scale: f64,
    pre_projection: Linear,
    post_projection: Linear,
    layers: Vec<DraftLayer>,
    norm: RmsNorm,
    head: Head,
    /// Target slot whose offset is the draft position.
    position_slot: usize,
}

impl Gemma4Assistant {
    /// Builds the drafter from the assistant's config/weights and its
    /// target's plan/weights.
    pub fn load(
        cfg: &AssistantConfig,
        w: &dyn Weights,
        target_plan: &ModelPlan,
        target_w: &dyn Weights,
    ) -> Result<Gemma4Assistant> {
        if target_plan.family.as_str() != "gemma4" || target_plan.model_type.as_str() == MODEL_TYPE {
            return Err(Error::msg(format!(
                "a gemma4_assistant drafts for a gemma4 target; the target is {} ({})",
                target_plan.family, target_plan.model_type
            )));
        }
        let tcfg = Config::from_plan(target_plan)?;
        if cfg.backbone_hidden_size != tcfg.hidden_size {
            return Err(Error::msg(format!(
                "config: backbone_hidden_size {} differs from the target's hidden_size {}",
                cfg.backbone_hidden_size, tcfg.hidden_size
            )));
        }
        let target_slots = &target_plan.caches;
        let last = |full: bool| {
            target_slots
                .iter()
                .rposition(|k| matches!(k, CacheKind::Full) == full && !matches!(k, CacheKind::Recurrent { .. }))
        };
        let t = &cfg.text;
        let layers = (0..t.num_hidden_layers as usize)
            .map(|i| {
                let full = t.full[i];
                let kind = if full { "full" } else { "sliding" };
                let slot = last(full).ok_or_else(|| {
                    Error::msg(format!(
                        "gemma4_assistant layer {i} reads {kind} attention, which the target has no cache for"
                    ))
                })?;
                if t.head_dim_of(full) != tcfg.head_dim_of(full) {
                    return Err(Error::msg(format!(
                        "config: gemma4_assistant layer {i} ({kind}) has head_dim {}, the target's {kind} layers {}",
                        t.head_dim_of(full),
                        tcfg.head_dim_of(full)
                    )));
                }
                Ok(DraftLayer {
                    layer: Gemma4Layer::load(t, w, &format!("model.layers.{i}"), i, false, i, false)?,
                    slot,
                    mask: if full { AttnMask::None } else { AttnMask::Causal },
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let (h, v, bh) = (t.hidden_size, t.vocab_size, cfg.backbone_hidden_size);
        let head = if cfg.use_ordered_embeddings {
            let ordering = w.tensor("masked_embedding.token_ordering", &[v], Kind::Any)?;
            Head::Masked {
                centroids: Linear::load(w, "masked_embedding.centroids", h, cfg.num_centroids)?,
                ordering: ordering.astype(Dtype::I32)?.reshape(&[cfg.num_centroids, -1])?,
                embed: Embedding::load(w, "model.embed_tokens", v, h)?,
                top_k: cfg.centroid_intermediate_top_k,
                vocab: v,
            }
        } else if cfg.tie_word_embeddings {
            Head::Dense(OutputHead::Tied(Embedding::load(w, "model.embed_tokens", v, h)?))
        } else {
            Head::Dense(OutputHead::Untied(Linear::load(w, "lm_head", h, v)?))
        };
        let target_embed = format!("{}model.embed_tokens", tcfg.prefix());
        Ok(Gemma4Assistant {
            target_embed: Embedding::load(target_w, &target_embed, tcfg.vocab_size, tcfg.hidden_size)?,
            target_embed_scale: (tcfg.hidden_size as f64).sqrt(),
            pre_projection: Linear::load(w, "pre_projection", 2 * bh, h)?,
            post_projection: Linear::load(w, "post_projection", h, bh)?,
            position_slot: layers.first().map_or(0, |l| l.slot),
            layers,
            norm: RmsNorm::load(w, "model.norm", h, t.rms_norm_eps)?,
            head,
        })
    }
}

impl Drafter for Gemma4Assistant {
    fn step(
        &mut self,
        hidden: &Array,
        tokens: &Array,
        target: &mut Caches<'_>,
        _own: &mut Caches<'_>,
    ) -> Result<(Array, Array)> {
        let l = hidden.dim(1);
        if tokens.ndim() != 2 || tokens.dim(1) != l || l < 1 {
            return Err(Error::msg(format!(
                "gemma4_assistant: hidden {:?} and tokens {:?} must both be [B, L]",
                hidden.shape(),
                tokens.shape()
            )));
        }
        // Only the last position drafts: its hidden state and the token after it.
        let h = hidden.slice_axis(1, l - 1, l)?;
        let tok = tokens.slice_axis(1, l - 1, l)?;
        let e = self.target_embed.forward(&tok)?.mul_s(self.target_embed_scale)?;
        let mut x = self.pre_projection.forward(&concatenate(&[&e, &h], -1)?)?;
        let offset = target.offset(self.position_slot)? as i32;
        for d in &self.layers {
            let a = d.layer.attn.forward_cached(
                &d.layer.input_norm.forward(&x)?,
                target,
                d.slot,
                offset,
                d.mask.clone(),
            )?;
            x = d.layer.finish(&x, &a, None)?;
        }
        let x = self.norm.forward(&x)?;
        Ok((self.head.forward(&x)?, self.post_projection.forward(&x)?))
    }
}
