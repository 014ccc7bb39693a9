//! One Qwen3.5 decoder layer: a token mixer (gated delta net, or gated full
//! attention from the shared layers) and a channel mixer (SwiGLU MLP, or the
//! sparse MoE block), each behind an RMS norm.

use crate::config::Config;
use crate::gdn::GatedDeltaNet;
use mlx::nn::{GatedMlp, RmsNorm, Rope, Weights};
use mlx::{Array, Error, Result};
use plugin_api::layers::{Attention, FeedForward, Rotary, SparseMoe};
use plugin_api::Caches;

/// A layer's token mixer.
#[derive(Debug, Clone)]
pub enum Mixer {
    /// Gated delta net, "linear attention" (recurrent cache slot).
    DeltaNet(Box<GatedDeltaNet>),
    /// Gated full attention (KV cache slot): the query projection carries a
    /// per-head output gate, q/k RMS norms, partial rope.
    Attention(Box<Attention>),
}

/// A layer's channel mixer.
#[derive(Debug, Clone)]
pub enum Mlp {
    /// SwiGLU MLP.
    Dense(Box<GatedMlp>),
    /// Routed experts + shared expert.
    Sparse(Box<SparseMoe>),
}

/// One pre-norm decoder layer.
#[derive(Debug, Clone)]
pub struct Layer {
    /// token mixer
    pub mixer: Mixer,
    /// channel mixer
    pub mlp: Mlp,
    input_norm: RmsNorm,
    post_norm: RmsNorm,
}

impl Layer {
    /// Loads the layer under `p` (`{p}.linear_attn` or `{p}.self_attn`,
    /// `{p}.mlp`, the two norms): linear attention or gated full attention,
    /// a sparse MoE block or a dense MLP.
    pub fn load(w: &dyn Weights, p: &str, cfg: &Config, linear: bool, sparse: bool, rope: &Rope) -> Result<Self> {
        let (eps, h) = (cfg.rms_norm_eps, cfg.hidden_size);
        let mixer = if linear {
            Mixer::DeltaNet(Box::new(GatedDeltaNet::load(w, &format!("{p}.linear_attn"), h, cfg.gdn, eps)?))
        } else {
            Mixer::Attention(Box::new(Attention::load(w, &format!("{p}.self_attn"), &cfg.attention(), rope.clone())?))
        };
        let mlp = match &cfg.moe {
            Some(m) if sparse => Mlp::Sparse(Box::new(crate::moe::load(w, &format!("{p}.mlp"), h, m)?)),
            _ => {
                let inter = cfg.intermediate_size.ok_or_else(|| {
                    Error::msg(format!("config: missing field `intermediate_size` ({p} has a dense MLP)"))
                })?;
                Mlp::Dense(Box::new(GatedMlp::load(w, &format!("{p}.mlp"), h, inter)?))
            }
        };
        Ok(Layer {
            mixer,
            mlp,
            input_norm: RmsNorm::load(w, &format!("{p}.input_layernorm"), h, eps)?,
            post_norm: RmsNorm::load(w, &format!("{p}.post_attention_layernorm"), h, eps)?,
        })
    }

    /// Runs the layer through cache `slot`. `rotary` is given for sequences
    /// with images, which follow mlx-vlm: attention rotates by it (M-RoPE)
    /// and the delta net scans prompt chunks chunk-parallel; without it,
    /// mlx-lm's text path (the rope at the cache offset, a sequential scan).
    pub fn forward(&self, x: &Array, caches: &mut Caches<'_>, slot: usize, rotary: Option<&Rotary>) -> Result<Array> {
        let n = self.input_norm.forward(x)?;
        let r = match (&self.mixer, rotary) {
            (Mixer::DeltaNet(g), rot) => g.forward(&n, caches, slot, rot.is_some())?,
            (Mixer::Attention(a), Some(rot)) => a.forward_rotary(&n, caches, slot, rot)?,
            (Mixer::Attention(a), None) => a.forward(&n, caches, slot)?,
        };
        let h = x.add(&r)?;
        let n = self.post_norm.forward(&h)?;
        let m = match &self.mlp {
            Mlp::Dense(m) => m.forward(&n)?,
            Mlp::Sparse(m) => m.forward(&n)?,
        };
        h.add(&m)
    }
}
