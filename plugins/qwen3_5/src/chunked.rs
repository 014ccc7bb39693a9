//! The delta-rule scan over a prompt in chunks of 64 tokens, as mlx-vlm
//! runs Qwen3.5's linear attention on backends without its Metal kernel
//! (CPU, CUDA): within a chunk the recurrence is solved in parallel (a unit
//! lower-triangular system), across chunks the state is carried step by
//! step. The same function as the sequential scan, rounded differently; it
//! is what sequences with images use, so their numbers are mlx-vlm's.

use mlx::{Array, Dtype, Result};

/// Tokens per chunk.
const CHUNK: i32 = 64;

/// The inverse of unit lower-triangular `t` (`[..., C, C]`), row by row by
/// forward substitution (stable where repeated squaring overflows).
fn invert_unit_lower(t: &Array, c: i32) -> Result<Array> {
    let x = mlx::eye(c, c, 0, Dtype::F32)?.broadcast_to(t.shape())?.add(&mlx::zeros(t.shape(), t.dtype())?)?;
    let mut rows = vec![x.slice_axis(-2, 0, 1)?];
    for i in 1..c {
        let tij = t.slice_axis(-2, i, i + 1)?.slice_axis(-1, 0, i)?;
        let xj = mlx::concatenate(&rows.iter().collect::<Vec<_>>(), -2)?;
        rows.push(x.slice_axis(-2, i, i + 1)?.sub(&tij.matmul(&xj)?)?);
    }
    mlx::concatenate(&rows.iter().collect::<Vec<_>>(), -2)
}

/// The scan of [`crate::gdn::scan_ops`] (same shapes and results up to
/// rounding) computed chunk-parallel in float32.
pub fn scan_chunked(q: &Array, k: &Array, v: &Array, g: &Array, beta: &Array, state: &Array) -> Result<(Array, Array)> {
    let (b, t, hk, dk) = (q.dim(0), q.dim(1), q.dim(2), q.dim(3));
    let (hv, dv) = (v.dim(2), v.dim(3));
    let in_dtype = v.dtype();
    let (mut q, mut k) =
        if hv / hk > 1 { (q.repeat(hv / hk, -2)?, k.repeat(hv / hk, -2)?) } else { (q.clone(), k.clone()) };
    let (mut v, mut g, mut beta) = (v.clone(), g.clone(), beta.clone());
    let c = CHUNK;
    let pad = (c - t % c) % c;
    if pad > 0 {
        // Padding tokens neither decay nor write the state.
        let zeros = |d: i32, dt: Dtype| mlx::zeros(&[b, pad, hv, d], dt);
        q = mlx::concatenate(&[&q, &zeros(dk, q.dtype())?], 1)?;
        k = mlx::concatenate(&[&k, &zeros(dk, k.dtype())?], 1)?;
        v = mlx::concatenate(&[&v, &zeros(dv, v.dtype())?], 1)?;
        g = mlx::concatenate(&[&g, &mlx::ones(&[b, pad, hv], g.dtype())?], 1)?;
        beta = mlx::concatenate(&[&beta, &mlx::zeros(&[b, pad, hv], beta.dtype())?], 1)?;
    }
    let tp = t + pad;
    let n = tp / c;
    let chunks = |x: &Array, d: i32| -> Result<Array> {
        x.reshape(&[b, n, c, hv, d])?.transpose(&[0, 3, 1, 2, 4])?.astype(Dtype::F32)
    };
    let (q, k, v) = (chunks(&q, dk)?, chunks(&k, dk)?, chunks(&v, dv)?);
    let g = g.reshape(&[b, n, c, hv])?.transpose(&[0, 3, 1, 2])?;
    let beta = beta.reshape(&[b, n, c, hv])?.transpose(&[0, 3, 1, 2])?;

    // Log of the cumulative decay within each chunk (g kept off 0 so the
    // log stays finite).
    let lcg = g.clip(Some(&Array::f32(1e-6)), Some(&Array::f32(1.0)))?.log()?.cumsum(-1, false, true)?;
    let cumg = lcg.exp()?;
    let ones = mlx::ones(&[c, c], Dtype::F32)?;
    let lower_incl = ones.tril(0)?;
    let strict_lower = ones.tril(-1)?;
    // Decay from token j to token i (i ≥ j); the upper triangle is masked
    // before the exp so it cannot overflow.
    let diff = mlx::where_(
        &lower_incl.gt(&Array::f32(0.0))?,
        &lcg.expand_dims(&[-1])?.sub(&lcg.expand_dims(&[-2])?)?,
        &Array::f32(-1e30),
    )?;
    let dr = diff.exp()?;
    let kt = k.swapaxes(-1, -2)?;
    let kk = k.matmul(&kt)?;
    let beta_col = beta.expand_dims(&[-1])?;
    let a = beta_col.mul(&dr)?.mul(&kk)?.mul(&strict_lower)?;
    let tinv = invert_unit_lower(&mlx::eye(c, c, 0, Dtype::F32)?.add(&a)?, c)?;
    let kbeta = beta.mul(&cumg)?.expand_dims(&[-1])?.mul(&k)?;
    let u0 = tinv.matmul(&beta_col.mul(&v)?)?;
    let kt_eff = tinv.matmul(&kbeta)?;
    let m = dr.mul(&q.matmul(&kt)?)?.mul(&lower_incl)?;
    let q_eff = cumg.expand_dims(&[-1])?.mul(&q)?.sub(&m.matmul(&kt_eff)?)?;
    let mu0 = m.matmul(&u0)?;
    let cumg_last = cumg.slice_axis(-1, c - 1, c)?.squeeze(&[-1])?;
    let ratio_last = lcg.slice_axis(-1, c - 1, c)?.sub(&lcg)?.exp()?;

    let mut s = state.astype(Dtype::F32)?;
    let mut ys = Vec::with_capacity(n as usize);
    let at = |x: &Array, i: i32| -> Result<Array> { x.slice_axis(2, i, i + 1)?.squeeze(&[2]) };
    for i in 0..n {
        let st = s.swapaxes(-1, -2)?;
        ys.push(at(&mu0, i)?.add(&at(&q_eff, i)?.matmul(&st)?)?);
        let uc = at(&u0, i)?.sub(&at(&kt_eff, i)?.matmul(&st)?)?;
        let scaled = at(&ratio_last, i)?.expand_dims(&[-1])?.mul(&uc)?;
        s = at(&cumg_last, i)?.expand_dims(&[-1, -2])?.mul(&s)?.add(&scaled.swapaxes(-1, -2)?.matmul(&at(&k, i)?)?)?;
    }
    let y = mlx::stack(&ys.iter().collect::<Vec<_>>(), 2)?
        .transpose(&[0, 2, 3, 1, 4])?
        .reshape(&[b, tp, hv, dv])?
        .slice_axis(1, 0, t)?
        .astype(in_dtype)?;
    Ok((y, s))
}
