//! Putting a tower's rows (vision or audio) into the text model's input
//! embeddings.

use mlx::{Array, Dtype, Result};

/// `embeds` (`[1, L, H]`) with the rows at the positions where `tokens`
/// (`[1, L]`) is one of `placeholders` replaced, in order of position, by
/// `rows` (`[M, H]`, M the number of such positions; the host checks the
/// counts). Images and audio clips share one run of rows: the host orders
/// them by where their placeholders sit.
pub fn splice_rows(embeds: &Array, tokens: &Array, rows: &Array, placeholders: &[u32]) -> Result<Array> {
    let mut mask: Option<Array> = None;
    for &t in placeholders {
        let m = tokens.eq(&Array::i32(t as i32))?;
        mask = Some(match mask {
            Some(prev) => prev.logical_or(&m)?,
            None => m,
        });
    }
    let Some(mask) = mask else { return Ok(embeds.clone()) };
    // The k-th placeholder takes row k: an inclusive running count, minus one.
    let idx = mask.astype(Dtype::I32)?.cumsum(1, false, true)?.sub(&Array::i32(1))?.maximum(&Array::i32(0))?;
    let l = tokens.dim(1);
    let picked = rows.astype(embeds.dtype())?.take(&idx.reshape(&[l])?, 0)?.reshape(&[1, l, rows.dim(-1)])?;
    mlx::where_(&mask.expand_dims(&[-1])?, &picked, embeds)
}
