//! The output head of a language model: its own matrix, or the token
//! embedding used backwards (tied).

use super::linear::{Embedding, Linear};
use super::weights::Weights;
use crate::{Array, Result};

/// Hidden states to logits.
#[derive(Debug, Clone)]
pub enum OutputHead {
    /// `x Eᵀ` with the token embedding `E`.
    Tied(Embedding),
    /// An `lm_head` matrix.
    Untied(Linear),
}

impl OutputHead {
    /// The tied head over `embed`, or `{prefix}.weight` (+ quantization) of
    /// `hidden → vocab` when the checkpoint has its own head.
    pub fn load(w: &dyn Weights, prefix: &str, embed: &Embedding, tied: bool, hidden: i32, vocab: i32) -> Result<Self> {
        Ok(if tied {
            OutputHead::Tied(embed.clone())
        } else {
            OutputHead::Untied(Linear::load(w, prefix, hidden, vocab)?)
        })
    }

    /// Logits of `x` (`[..., hidden]`).
    pub fn forward(&self, x: &Array) -> Result<Array> {
        match self {
            OutputHead::Tied(e) => e.as_linear(x),
            OutputHead::Untied(l) => l.forward(x),
        }
    }
}
