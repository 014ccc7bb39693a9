//! The media of a sequence: each image's or
//! clip's rows (what replaces its placeholder tokens) at their absolute
//! positions, and the rotary positions of the whole sequence for families
//! that place images in 2-D. A forward takes the part that falls in its
//! chunk.

use anyhow::Result;
use mlx::Array;

/// One image's or clip's rows in the sequence.
#[derive(Clone)]
pub struct MediaSpan {
    /// The position of its first placeholder token.
    pub start: usize,
    /// Its rows `[tokens, hidden]`.
    pub rows: Array,
    /// Whether prefill must keep its placeholders in one forward (images,
    /// when the family's [`plugin_api::MediaSpec::keep_images_whole`]).
    pub whole: bool,
}

/// The images and clips of the current sequence.
#[derive(Clone, Default)]
pub struct MediaState {
    /// Per item, in order of position.
    pub spans: Vec<MediaSpan>,
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
        for span in &self.spans {
            let (s, n) = (span.start, span.rows.dim(0) as usize);
            let (a, b) = (start.max(s), end.min(s + n));
            if a < b {
                parts.push(span.rows.slice_axis(0, (a - s) as i32, (b - s) as i32)?);
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
