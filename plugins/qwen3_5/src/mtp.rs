//! Qwen3.5's multi-token-prediction head as a speculative-decoding drafter.
//!
//! One draft step, for `L` positions with the target's hidden states `h`
//! and, for each, the token `t` that follows it:
//!
//! ```text
//! x = fc(concat(norm_e(embed(t)), norm_h(h)))       # [B, L, 2H] -> [B, L, H]
//! x = layer_i(x) for each MTP layer                 # gated full attention over the drafter's own KV slot i
//! y = norm(x)[:, -1:]                               # hidden chained into the next step
//! logits = lm_head(y)                               # the target's head (or tied embedding)
//! ```
//!
//! `h` is what the target's `forward` returns with `want_hidden`: the last
//! decoder layer's output **after** the final RMSNorm (mlx-vlm 0.7.10's
//! Qwen3.5 MTP runs on that too: its verify pass returns `model.norm(hidden)`
//! and feeds it to the drafter unchanged). The embedding and output head are
//! the target's own tensors; the MTP layers keep their KV in the drafter's
//! cache slots, so rope positions are those slots' offsets (consecutive by
//! the drafter protocol, starting at 0 with the prompt's first position).

use crate::config::Config;
use crate::layer::Layer;
use crate::names::{LM_HEAD, MTP_PREFIX, PREFIX};
use mlx::nn::{Embedding, Linear, OutputHead, RmsNorm, Weights};
use mlx::{Array, Error, Result};
use plugin_api::CacheKind;
use plugin_api::{Caches, Drafter};

/// True when `w` carries an MTP head (its input projection).
pub fn has_mtp(w: &dyn Weights) -> bool {
    w.get(&format!("{MTP_PREFIX}fc.weight")).is_some()
}

/// The MTP drafter.
#[derive(Debug, Clone)]
pub struct MtpDrafter {
    embed: Embedding,
    head: OutputHead,
    fc: Linear,
    norm_embed: RmsNorm,
    norm_hidden: RmsNorm,
    layers: Vec<Layer>,
    norm: RmsNorm,
    hidden_size: i32,
}

impl MtpDrafter {
    /// Builds the head from `w` (MTP tensors, config `cfg`) beside the target
    /// model whose embedding and output head are in `target` (config `tcfg`).
    pub fn load(cfg: &Config, w: &dyn Weights, tcfg: &Config, target: &dyn Weights) -> Result<Self> {
        if cfg.hidden_size != tcfg.hidden_size || cfg.vocab_size != tcfg.vocab_size {
            return Err(Error::msg(format!(
                "MTP head: hidden size {} / vocabulary {} differ from the target's {} / {}",
                cfg.hidden_size, cfg.vocab_size, tcfg.hidden_size, tcfg.vocab_size
            )));
        }
        let n = cfg.mtp_layers;
        if n < 1 {
            return Err(Error::msg(format!(
                "config: mtp_num_hidden_layers is {n} but the checkpoint has MTP weights ({MTP_PREFIX}fc.weight)"
            )));
        }
        let eps = cfg.rms_norm_eps;
        let rope = cfg.rope()?;
        // mlx-vlm builds every MTP layer as a full-attention decoder layer,
        // with the MoE block whenever the text model is an MoE.
        let layers = (0..n)
            .map(|i| Layer::load(w, &format!("{MTP_PREFIX}layers.{i}"), cfg, false, cfg.moe.is_some(), &rope))
            .collect::<Result<Vec<_>>>()?;
        let (h, v) = (cfg.hidden_size, cfg.vocab_size);
        let embed = Embedding::load(target, &format!("{PREFIX}embed_tokens"), v, h)?;
        Ok(MtpDrafter {
            head: OutputHead::load(target, LM_HEAD, &embed, tcfg.tie_word_embeddings, h, v)?,
            embed,
            fc: Linear::load(w, &format!("{MTP_PREFIX}fc"), 2 * h, h)?,
            norm_embed: RmsNorm::load(w, &format!("{MTP_PREFIX}pre_fc_norm_embedding"), h, eps)?,
            norm_hidden: RmsNorm::load(w, &format!("{MTP_PREFIX}pre_fc_norm_hidden"), h, eps)?,
            layers,
            norm: RmsNorm::load(w, &format!("{MTP_PREFIX}norm"), h, eps)?,
            hidden_size: h,
        })
    }
}

impl Drafter for MtpDrafter {
    fn cache_kinds(&self) -> Vec<CacheKind> {
        vec![CacheKind::Full; self.layers.len()]
    }

    fn step(
        &mut self,
        hidden: &Array,
        tokens: &Array,
        _target: &mut Caches<'_>,
        own: &mut Caches<'_>,
    ) -> Result<(Array, Array)> {
        if hidden.ndim() != 3 || hidden.dim(-1) != self.hidden_size {
            return Err(Error::msg(format!(
                "MTP step: hidden state of shape {:?}, expected [B, L, {}]",
                hidden.shape(),
                self.hidden_size
            )));
        }
        if tokens.ndim() != 2 || tokens.dim(0) != hidden.dim(0) || tokens.dim(1) != hidden.dim(1) {
            return Err(Error::msg(format!(
                "MTP step: tokens of shape {:?} for a hidden state of shape {:?} (want [B, L])",
                tokens.shape(),
                hidden.shape()
            )));
        }
        if own.len() < self.layers.len() {
            return Err(Error::msg(format!("MTP step: {} cache slots given, {} needed", own.len(), self.layers.len())));
        }
        let e = self.embed.forward(tokens)?;
        let x = mlx::concatenate(&[&self.norm_embed.forward(&e)?, &self.norm_hidden.forward(hidden)?], -1)?;
        let mut h = self.fc.forward(&x)?;
        for (i, l) in self.layers.iter().enumerate() {
            h = l.forward(&h, own, i, None)?;
        }
        // Only the last position is read out (the norm is per position).
        let l = h.dim(1);
        let y = self.norm.forward(&h.slice_axis(1, l - 1, l)?)?;
        Ok((self.head.forward(&y)?, y))
    }
}
