//! The output head of a language model: its own matrix, or the token
//! embedding used backwards (tied).

use super::linear::{Embedding, Linear, Split};
use super::parallel::Parallel;
use super::weights::Weights;
use crate::{Array, Result};

/// Hidden states to logits.
#[derive(Debug, Clone)]
pub enum OutputHead {
    /// `x Eᵀ` with the token embedding `E`.
    Tied(Embedding),
    /// An `lm_head` matrix.
    Untied(Linear),
    /// This rank's run of an `lm_head`'s vocabulary rows (tensor parallel):
    /// the logits of every rank's run gathered into the whole row.
    Sharded(Linear),
}

impl OutputHead {
    /// The tied head over `embed`, or `{prefix}.weight` (+ quantization) of
    /// `hidden → vocab` when the checkpoint has its own head.
    pub fn load(w: &dyn Weights, prefix: &str, embed: &Embedding, tied: bool, hidden: i32, vocab: i32) -> Result<Self> {
        Self::load_with_bias(w, prefix, embed, tied, hidden, vocab, false)
    }

    /// [`OutputHead::load`], a head of its own carrying `{prefix}.bias`
    /// (required) when `bias` (Phi's); a tied head has none.
    pub fn load_with_bias(
        w: &dyn Weights,
        prefix: &str,
        embed: &Embedding,
        tied: bool,
        hidden: i32,
        vocab: i32,
        bias: bool,
    ) -> Result<Self> {
        // Split by vocabulary where it splits evenly (the gather needs equal
        // runs), as mlx-lm does; the tied head stays whole with the embedding.
        let split = Parallel::tensor(w.parallel()).filter(|p| vocab % p.size == 0);
        Ok(match (tied, split) {
            (true, _) => OutputHead::Tied(embed.clone()),
            (false, Some(p)) => {
                let (a, b) = p.share(vocab, "vocabulary rows")?;
                OutputHead::Sharded(Linear::load_split(w, prefix, hidden, vocab, bias, &Split::Rows(vec![(a, b)]))?)
            }
            (false, None) => OutputHead::Untied(Linear::load_with_bias(w, prefix, hidden, vocab, bias)?),
        })
    }

    /// Logits of `x` (`[..., hidden]`).
    pub fn forward(&self, x: &Array) -> Result<Array> {
        match self {
            OutputHead::Tied(e) => e.as_linear(x),
            OutputHead::Untied(l) => l.forward(x),
            OutputHead::Sharded(l) => {
                // [..., V/N] from each rank → [N, ..., V/N] → [..., N, V/N] → [..., V].
                let y = l.forward(x)?;
                let n = y.ndim() as i32;
                let parts = crate::distributed::all_gather(&y.expand_dims(&[0])?)?;
                let mut axes: Vec<i32> = (1..=n).collect();
                axes.insert(n as usize - 1, 0);
                let mut shape = y.shape().to_vec();
                let last = shape.pop().expect("logits have a vocabulary axis") * parts.dim(0);
                shape.push(last);
                parts.transpose(&axes)?.reshape(&shape)
            }
        }
    }
}
