//! One Gemma 4 decoder layer: attention (the shared layer with Gemma's
//! options) and a GeGLU MLP between four norms, the MoE branch where the
//! config enables it, the per-layer input gate of E2B/E4B and the layer's
//! output scalar.

use crate::config::Config;
use crate::moe::MoeBlock;
use mlx::nn::{geglu, GatedMlp, GluActivation, Kind, Linear, RmsNorm, Weights};
use mlx::{Array, Error, Result};
use plugin_api::layers::{Attention, SharedKv};
use plugin_api::Caches;

/// Per-layer input gating of the E2B/E4B models.
#[derive(Debug, Clone)]
struct PerLayerGate {
    gate: Linear,
    proj: Linear,
    norm: RmsNorm,
}

/// One decoder layer.
#[derive(Debug, Clone)]
pub struct Gemma4Layer {
    /// self-attention
    pub attn: Attention,
    mlp: GatedMlp,
    /// norm before attention
    pub input_norm: RmsNorm,
    post_attn_norm: RmsNorm,
    pre_ff_norm: RmsNorm,
    post_ff_norm: RmsNorm,
    per_layer: Option<PerLayerGate>,
    moe: Option<MoeBlock>,
    scalar: Option<Array>,
    /// Cache slot (None: KV-shared).
    pub slot: Option<usize>,
    /// Layer whose K/V this one reads.
    pub source: usize,
    /// Whether later layers read this one's K/V.
    shared_out: bool,
    /// Sliding window (None: global attention).
    window: Option<i32>,
}

impl Gemma4Layer {
    /// Loads decoder layer `i` from `{lp}.*`. A layer without K/V (`has_kv`
    /// false: KV-shared, or an assistant layer reading the target's K/V)
    /// has no k/v projections and no cache slot; it reads layer `source`'s
    /// K/V. `shared_out`: later layers read this one's.
    pub fn load(
        cfg: &Config,
        w: &dyn Weights,
        lp: &str,
        i: usize,
        has_kv: bool,
        source: usize,
        shared_out: bool,
    ) -> Result<Gemma4Layer> {
        let (eps, h) = (cfg.rms_norm_eps, cfg.hidden_size);
        let pl = cfg.hidden_size_per_layer_input;
        let full = cfg.full[i];
        let shape = cfg.attention(i, has_kv);
        let rope = if full { &cfg.rope_full } else { &cfg.rope_sliding }.rope(shape.head_dim, cfg.rope_traditional)?;
        let norm = |n: &str| RmsNorm::load(w, &format!("{lp}.{n}"), h, eps);
        let per_layer = (pl > 0)
            .then(|| -> Result<PerLayerGate> {
                Ok(PerLayerGate {
                    gate: Linear::load(w, &format!("{lp}.per_layer_input_gate"), h, pl)?,
                    proj: Linear::load(w, &format!("{lp}.per_layer_projection"), pl, h)?,
                    norm: norm("post_per_layer_input_norm")?,
                })
            })
            .transpose()?;
        let scalar = match w.get(&format!("{lp}.layer_scalar")) {
            Some(_) => Some(w.tensor(&format!("{lp}.layer_scalar"), &[1], Kind::Float)?),
            None => None,
        };
        let mlp = format!("{lp}.mlp");
        Ok(Gemma4Layer {
            attn: Attention::load(w, &format!("{lp}.self_attn"), &shape, rope)?,
            moe: cfg.enable_moe_block.then(|| MoeBlock::load(w, lp, cfg)).transpose()?,
            mlp: GatedMlp::load_with(w, &mlp, h, cfg.mlp_width(i), GluActivation::GeluApprox)?,
            input_norm: norm("input_layernorm")?,
            post_attn_norm: norm("post_attention_layernorm")?,
            pre_ff_norm: norm("pre_feedforward_layernorm")?,
            post_ff_norm: norm("post_feedforward_layernorm")?,
            per_layer,
            scalar,
            slot: has_kv.then_some(i),
            source,
            shared_out,
            window: (!full).then_some(cfg.sliding_window),
        })
    }

    /// Runs the layer: through its cache slot (keeping the K/V it attended
    /// over when later layers read them), or over `shared` K/V when it owns
    /// none; `overlay` widens the mask (image tokens seeing their image).
    pub fn forward(
        &self,
        x: &Array,
        caches: &mut Caches<'_>,
        shared: Option<&SharedKv>,
        per_layer_input: Option<&Array>,
        overlay: Option<&Array>,
    ) -> Result<(Array, Option<SharedKv>)> {
        let n = self.input_norm.forward(x)?;
        let (a, kept) = match (shared, self.slot) {
            (Some(kv), _) => (self.attn.forward_shared(&n, kv, overlay)?, None),
            (None, Some(slot)) if self.shared_out || overlay.is_some() => {
                let (a, kv) = self.attn.forward_keeping(&n, caches, slot, self.window, overlay)?;
                (a, self.shared_out.then_some(kv))
            }
            (None, Some(slot)) => (self.attn.forward(&n, caches, slot)?, None),
            (None, None) => return Err(Error::msg("gemma4: a layer without K/V projections got no shared K/V")),
        };
        Ok((self.finish(x, &a, per_layer_input)?, kept))
    }

    /// The rest of the layer after its attention output `a`: residuals,
    /// MLP (and MoE), per-layer input gate, layer scalar.
    pub fn finish(&self, x: &Array, a: &Array, per_layer_input: Option<&Array>) -> Result<Array> {
        let h = x.add(&self.post_attn_norm.forward(a)?)?;
        let mut f = self.mlp.forward(&self.pre_ff_norm.forward(&h)?)?;
        if let Some(moe) = &self.moe {
            // Dense MLP and routed experts side by side, each normed, summed;
            // the router and experts read the residual itself.
            f = moe.post_norm_dense.forward(&f)?.add(&moe.experts(&h)?)?;
        }
        let mut h = h.add(&self.post_ff_norm.forward(&f)?)?;
        if let (Some(g), Some(pli)) = (&self.per_layer, per_layer_input) {
            let gate = geglu(&g.gate.forward(&h)?, pli)?;
            h = h.add(&g.norm.forward(&g.proj.forward(&gate)?)?)?;
        }
        if let Some(s) = &self.scalar {
            h = h.mul(s)?;
        }
        Ok(h)
    }
}
