//! The Qwen3.5 text model: embedding, the hybrid decoder layers (one cache
//! slot each), the final norm and the output head.

use crate::config::Config;
use crate::gdn::ScanPath;
use crate::layer::{Layer, Mixer};
use crate::names::{LM_HEAD, PREFIX};
use mlx::nn::{Embedding, OutputHead, RmsNorm, Weights};
use mlx::Result;
use plugin_api::family::{Caches, Input, ModelForward, Output};
use plugin_api::layers::lm_output;

/// The Qwen3.5 text model.
#[derive(Debug, Clone)]
pub struct Qwen3_5 {
    embed: Embedding,
    /// decoder layers, one cache slot each
    pub layers: Vec<Layer>,
    norm: RmsNorm,
    head: OutputHead,
}

impl Qwen3_5 {
    /// Builds the model from weights under mlx-lm's names.
    pub fn load(cfg: &Config, w: &dyn Weights) -> Result<Self> {
        let rope = cfg.rope()?;
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| {
                let p = format!("{PREFIX}layers.{i}");
                Layer::load(w, &p, cfg, cfg.linear[i as usize], cfg.is_sparse(i), &rope)
            })
            .collect::<Result<Vec<_>>>()?;
        let (h, v) = (cfg.hidden_size, cfg.vocab_size);
        let embed = Embedding::load(w, &format!("{PREFIX}embed_tokens"), v, h)?;
        Ok(Qwen3_5 {
            head: OutputHead::load(w, LM_HEAD, &embed, cfg.tie_word_embeddings, h, v)?,
            embed,
            layers,
            norm: RmsNorm::load(w, &format!("{PREFIX}norm"), h, cfg.rms_norm_eps)?,
        })
    }

    /// Sets the scan implementation of every linear-attention layer.
    pub fn set_scan_path(&mut self, path: ScanPath) {
        for l in &mut self.layers {
            if let Mixer::DeltaNet(g) = &mut l.mixer {
                g.path = path;
            }
        }
    }
}

impl ModelForward for Qwen3_5 {
    fn forward(&mut self, input: &Input, caches: &mut Caches<'_>) -> Result<Output> {
        let mut h = input.embed(&self.embed)?;
        for (i, l) in self.layers.iter().enumerate() {
            h = l.forward(&h, caches, i)?;
        }
        // The hidden state returned with `want_hidden` is taken after the
        // final norm: what the MTP head (mtp.rs) is defined on.
        let h = self.norm.forward(&h)?;
        lm_output(h, input.logits, input.want_hidden, |x| self.head.forward(x))
    }
}
