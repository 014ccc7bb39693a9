//! Putting a vision tower's rows into the text model's input embeddings.

use mlx::{Array, Dtype, Result};

/// `embeds` (`[1, L, H]`) with the rows at the positions where `tokens`
/// (`[1, L]`) is `image_token` replaced, in order, by `rows` (`[M, H]`, M
/// the number of such positions; the host checks the counts).
pub fn splice_rows(embeds: &Array, tokens: &Array, rows: &Array, image_token: u32) -> Result<Array> {
    let mask = tokens.eq(&Array::i32(image_token as i32))?;
    // The k-th placeholder takes row k: an inclusive running count, minus one.
    let idx = mask.astype(Dtype::I32)?.cumsum(1, false, true)?.sub(&Array::i32(1))?.maximum(&Array::i32(0))?;
    let l = tokens.dim(1);
    let picked = rows.astype(embeds.dtype())?.take(&idx.reshape(&[l])?, 0)?.reshape(&[1, l, rows.dim(-1)])?;
    mlx::where_(&mask.expand_dims(&[-1])?, &picked, embeds)
}
