//! Rotary embedding from explicit per-token positions (cos/sin tables), for
//! models that place tokens in more than one dimension: Qwen's interleaved
//! M-RoPE, where each frequency follows the time, height or width axis.

use mlx::{Array, Dtype, Result};

/// cos/sin tables `[1, 1, L, dims]` for one call's tokens, applied to the
/// first `dims` features of each head (rotate-half pairing).
#[derive(Debug, Clone)]
pub struct Rotary {
    cos: Array,
    sin: Array,
    dims: i32,
}

impl Rotary {
    /// Interleaved M-RoPE: `positions` `[3, L]` int32 (time, height,
    /// width), frequency `j` of the `dims / 2` following axis 1 when
    /// `j % 3 == 1 && j < 3·sections[1]`, axis 2 when `j % 3 == 2 && j <
    /// 3·sections[2]`, else axis 0; inverse frequencies `1 / θ^(2j/dims)`
    /// computed in f32 with MLX ops; the tables rounded to `dtype`.
    pub fn mrope(positions: &Array, theta: f32, dims: i32, sections: [i32; 3], dtype: Dtype) -> Result<Rotary> {
        let half = dims / 2;
        let exps = mlx::arange(0.0, dims as f64, 2.0, Dtype::F32)?.div(&Array::f32(dims as f32))?;
        let inv = Array::f32(theta).power(&exps)?.reciprocal()?;
        let sel: Vec<i32> = (0..half)
            .map(|j| {
                if j % 3 == 1 && j < 3 * sections[1] {
                    1
                } else if j % 3 == 2 && j < 3 * sections[2] {
                    2
                } else {
                    0
                }
            })
            .collect();
        let l = positions.dim(-1);
        let pos = positions.reshape(&[3, l])?.take(&Array::from_slice(&sel, &[half])?, 0)?;
        let ang = pos.astype(Dtype::F32)?.transpose(&[1, 0])?.mul(&inv)?;
        let emb = mlx::concatenate(&[&ang, &ang], -1)?.reshape(&[1, 1, l, dims])?;
        Ok(Rotary { cos: emb.cos()?.astype(dtype)?, sin: emb.sin()?.astype(dtype)?, dims })
    }

    /// [`Rotary::mrope`] of `len` tokens that all share one position per
    /// axis, starting at `start` (text, and decode after images).
    pub fn mrope_run(start: i64, len: i32, theta: f32, dims: i32, sections: [i32; 3], dtype: Dtype) -> Result<Rotary> {
        let p = mlx::arange(start as f64, (start + len as i64) as f64, 1.0, Dtype::I32)?;
        let pos = mlx::stack(&[&p, &p, &p], 0)?;
        Rotary::mrope(&pos, theta, dims, sections, dtype)
    }

    /// Rotates the first `dims` features of `x` (`[B, H, L, D]`).
    pub fn apply(&self, x: &Array) -> Result<Array> {
        let d = x.dim(-1);
        let h = self.dims / 2;
        let xr = if d == self.dims { x.clone() } else { x.slice_axis(-1, 0, self.dims)? };
        let half = mlx::concatenate(&[&xr.slice_axis(-1, h, self.dims)?.neg()?, &xr.slice_axis(-1, 0, h)?], -1)?;
        let y = xr.mul(&self.cos)?.add(&half.mul(&self.sin)?)?;
        if d == self.dims {
            Ok(y)
        } else {
            mlx::concatenate(&[&y, &x.slice_axis(-1, self.dims, d)?], -1)
        }
    }
}
