//! Pipeline parallelism: each rank holds a run of a model's layers; the
//! hidden state enters a rank from the one before it and leaves for the one
//! after, and the last rank's output is then shared with every rank so all
//! compute the same logits (and sample the same tokens).

use crate::family::Input;
use crate::LogitsWanted;
use mlx::distributed as dist;
use mlx::nn::{Parallel, Weights};
use mlx::{Array, Dtype, Result};
use std::ops::Range;

/// This rank's stage of a pipeline split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stage {
    /// This rank.
    pub rank: i32,
    /// Ranks (stages).
    pub size: i32,
    /// The layers this rank holds.
    pub layers: Range<usize>,
}

impl Stage {
    /// This rank's stage of `layers` layers when `w` is loaded for a
    /// pipeline split (the shares as even as whole layers allow), else
    /// `None`.
    pub fn of(w: &dyn Weights, layers: i32) -> Result<Option<Stage>> {
        Self::of_keeping(w, layers, None)
    }

    /// [`Stage::of`] with layers `together..` all on the last rank (layers
    /// that read each other's K/V in one forward, e.g. Gemma's KV-shared
    /// ones and their sources): when the even split would cut that run, the
    /// last rank takes all of it and the ranks before share the rest.
    pub fn of_keeping(w: &dyn Weights, layers: i32, together: Option<i32>) -> Result<Option<Stage>> {
        let Some(p) = Parallel::pipeline(w.parallel()) else { return Ok(None) };
        let last_start = |n: i32| mlx::nn::share(n, p.size - 1, p.size, "layers").map(|s| s.0);
        let (a, b) = match together {
            Some(t) if t < layers && last_start(layers)? > t => {
                if p.rank + 1 == p.size {
                    (t, layers)
                } else {
                    // The other ranks share the layers before the run.
                    mlx::nn::share(t, p.rank, p.size - 1, "layers before the KV-shared run")?
                }
            }
            _ => p.share(layers, "layers")?,
        };
        Ok(Some(Stage { rank: p.rank, size: p.size, layers: a as usize..b as usize }))
    }

    /// Whether this rank holds layer `i` (always, without a split).
    pub fn holds(stage: Option<&Stage>, i: usize) -> bool {
        stage.is_none_or(|s| s.layers.contains(&i))
    }

    /// The hidden state entering this rank's layers: `embed()` on the first
    /// rank (and without a split), else received from the rank before, of
    /// `shape` and `dtype`.
    pub fn enter(
        stage: Option<&Stage>,
        shape: &[i32],
        dtype: Dtype,
        embed: impl FnOnce() -> Result<Array>,
    ) -> Result<Array> {
        match stage {
            Some(s) if s.rank > 0 => dist::recv(shape, dtype, s.rank - 1),
            _ => embed(),
        }
    }

    /// The hidden state `h` leaving this rank's layers: sent on to the next
    /// rank, and the last rank's output gathered so every rank returns it.
    /// When `input` wants neither logits nor the hidden state (a prefill
    /// chunk that only fills caches), the send is done here and now (no
    /// cache of this rank depends on it, so nothing else would run it) and
    /// `h` comes back as is.
    pub fn leave(stage: Option<&Stage>, h: Array, input: &Input) -> Result<Array> {
        let Some(s) = stage else { return Ok(h) };
        let h = if s.rank + 1 < s.size { dist::send(&h, s.rank + 1)? } else { h };
        if !input.want_hidden && input.logits == LogitsWanted::None {
            h.eval()?;
            return Ok(h);
        }
        let b = h.dim(0);
        dist::all_gather(&h)?.slice_axis(0, (s.size - 1) * b, s.size * b)
    }
}
