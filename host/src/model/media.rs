//! The images of the sequence a model's caches are filling: each image's
//! rows (what replaces its placeholder tokens) at their absolute positions,
//! and the rotary positions of the whole sequence for families that place
//! images in 2-D. A forward takes the part that falls in its chunk.

use anyhow::Result;
use mlx::Array;

/// The images of the current sequence.
#[derive(Clone, Default)]
pub struct MediaState {
    /// Per image: the position of its first placeholder token and its rows
    /// `[tokens, hidden]`.
    pub spans: Vec<(usize, Array)>,
    /// Rotary positions of the whole sequence (family layout, positions on
    /// the last axis), when the family has them.
    pub positions: Option<Array>,
    /// What positions past the sequence add to the cache offset.
    pub delta: i64,
}

/// What one forward over positions `start..start + len` takes.
pub struct ChunkMedia {
    /// Rows for the placeholder tokens in the chunk, in order.
    pub rows: Option<Array>,
    /// The chunk's rotary positions.
    pub positions: Option<Array>,
    /// See [`MediaState::delta`].
    pub delta: i64,
}

impl MediaState {
    /// The media of the chunk `start..start + len`.
    pub fn chunk(&self, start: usize, len: usize) -> Result<ChunkMedia> {
        let end = start + len;
        let mut parts = Vec::new();
        for (s, rows) in &self.spans {
            let n = rows.dim(0) as usize;
            let (a, b) = (start.max(*s), end.min(s + n));
            if a < b {
                parts.push(rows.slice_axis(0, (a - s) as i32, (b - s) as i32)?);
            }
        }
        let rows = match parts.len() {
            0 => None,
            1 => parts.pop(),
            _ => Some(mlx::concatenate(&parts.iter().collect::<Vec<_>>(), 0)?),
        };
        let positions = match &self.positions {
            Some(p) if end as i32 <= p.dim(-1) => Some(p.slice_axis(-1, start as i32, end as i32)?),
            _ => None,
        };
        Ok(ChunkMedia { rows, positions, delta: self.delta })
    }
}
