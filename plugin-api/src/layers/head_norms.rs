//! One token's q/k/v head norms in one weightless norm and one multiply,
//! and its heads roped in one call (decode is bound by host time per node).

use mlx::fast::RopeOffset;
use mlx::nn::{RmsNorm, Rope};
use mlx::{Array, Result};

/// Per-head RMS norms of one token's fused q/k/v heads in one weightless
/// norm and one multiply, instead of a weighted norm per kind of head.
/// Bit-equal to the separate norms: MLX's weighted norm also rounds the
/// normed value to the activation dtype before scaling it.
#[derive(Debug, Clone)]
pub struct HeadNorms {
    /// `[1, hq + 2·hkv, 1, d]` (one token's heads, so the multiply needs no
    /// broadcast node): the q-norm scale on the query heads' rows, the
    /// k-norm scale on the key heads' and ones on the value heads'.
    rows: Array,
    eps: f32,
}

impl HeadNorms {
    /// From the q and k norms; the value heads are scaled by one (normed
    /// without a weight: gemma4's v norm; heads nobody reads: qwen3's).
    /// `None` when the two norms differ in epsilon, dtype or width: the
    /// layer then keeps its separate norms.
    pub fn new(q: &RmsNorm, k: &RmsNorm, hq: i32, hkv: i32) -> Result<Option<HeadNorms>> {
        let d = q.weight.dim(-1);
        let dt = q.weight.dtype();
        if q.eps != k.eps || k.weight.dtype() != dt || k.weight.dim(-1) != d {
            return Ok(None);
        }
        let qr = q.weight.reshape(&[1, d])?.broadcast_to(&[hq, d])?;
        let kr = k.weight.reshape(&[1, d])?.broadcast_to(&[hkv, d])?;
        let vr = mlx::ones(&[hkv, d], dt)?;
        let rows = mlx::concatenate(&[&qr, &kr, &vr], 0)?.reshape(&[1, hq + 2 * hkv, 1, d])?;
        mlx::eval(&[&rows])?;
        Ok(Some(HeadNorms { rows, eps: q.eps }))
    }

    /// Whether the result is bit-equal for activations of dtype `dt` (the
    /// scales must be stored in it, or the weighted norm would not round).
    pub fn fits(&self, dt: mlx::Dtype) -> bool {
        self.rows.dtype() == dt
    }

    /// Norms every head of `y` (`[B, hq + 2·hkv, 1, d]`).
    pub fn apply(&self, y: &Array) -> Result<Array> {
        mlx::fast::rms_norm(y, None, self.eps)?.mul(&self.rows)
    }
}

/// One token's fused heads `[B, hq + 2·hkv, 1, d]` roped in one call: the
/// query and key heads (the value heads' rotated copy is dropped, so the
/// caller takes v from the unrotated heads).
pub fn rope_one_token(rope: &Rope, heads: &Array, off: RopeOffset, hq: i32, hkv: i32) -> Result<(Array, Array)> {
    let mut r = rope.forward(heads, off)?.split_at(&[hq, hq + hkv], 1)?;
    r.truncate(2);
    let k = r.pop().expect("3 parts");
    Ok((r.pop().expect("3 parts"), k))
}
