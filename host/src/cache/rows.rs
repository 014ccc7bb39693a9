//! A batch of sequences as the plugin sees it: one [`RowsCache`] per slot,
//! over each row's own cache of that slot. Rows keep their own caches, of
//! any kind (dense, quantized, rotating, recurrent), so a sequence joins or
//! leaves the batch between steps by adding or dropping its caches: no
//! merge or copy. Attention runs per row on the row's cache; K/V fetched
//! for a family's own attention come back padded on the left to the
//! longest row, with [`RowsCache::row_mask`] saying which keys are real.

use super::attn::AttnArgs;
use super::shared::SharedCache;
use abi_stable::std_types::{RErr, ROk, ROption, RResult, RVec, Tuple2};
use mlx::{concatenate, Array, Dtype, Error, Result};
use plugin_api::abi::{ArrayHandle, LayerCache, PluginError};
use plugin_api::AttnOptions;

/// One slot of a batch: the rows' caches of that slot.
pub struct RowsCache {
    rows: Vec<SharedCache>,
    mask: Option<Array>,
}

/// A host result as the plugin boundary carries it.
pub(super) fn ffi<T>(r: Result<T>) -> RResult<T, PluginError> {
    match r {
        Ok(x) => ROk(x),
        Err(e) => RErr(e.into()),
    }
}

/// Each row's offset for the plugin's rope: `None` when all rows share one
/// (always for a batch of one), so the plain integer rope is used.
pub(super) fn offsets_handle(offsets: impl IntoIterator<Item = i64>) -> ROption<ArrayHandle> {
    let offs: Vec<i32> = offsets.into_iter().map(|o| o as i32).collect();
    if offs.windows(2).all(|w| w[0] == w[1]) {
        return ROption::RNone;
    }
    match Array::from_slice(&offs, &[offs.len() as i32]) {
        Ok(a) => ROption::RSome(a.into()),
        Err(_) => ROption::RNone,
    }
}

/// Which of `end` key columns are real for each row when row `r`'s
/// `lens[r]` keys are its last ones (`[B, 1, 1, end]` bool); `None` when
/// every row fills all `end`.
pub(super) fn right_aligned_mask(lens: &[i32], end: i32) -> Result<Option<Array>> {
    if lens.iter().all(|&n| n == end) {
        return Ok(None);
    }
    let first: Vec<i32> = lens.iter().map(|&n| end - n).collect();
    let first = Array::from_slice(&first, &[first.len() as i32, 1, 1, 1])?;
    let at = mlx::arange(0.0, end as f64, 1.0, Dtype::I32)?.reshape(&[1, 1, 1, end])?;
    Ok(Some(at.ge(&first)?))
}

/// Row `r` of `x` along axis 0, kept as a batch of one.
fn row(x: &Array, r: usize) -> Result<Array> {
    if x.ndim() == 0 || x.dim(0) == 1 {
        return Ok(x.clone());
    }
    x.slice_axis(0, r as i32, r as i32 + 1)
}

impl RowsCache {
    /// The slot over `rows` (one cache per sequence, in batch order).
    pub fn new(rows: Vec<SharedCache>) -> RowsCache {
        RowsCache { rows, mask: None }
    }

    /// Keeps rows `keep` (in order).
    pub fn keep(&mut self, keep: &[usize]) {
        self.rows = keep.iter().map(|&i| self.rows[i].clone()).collect();
        self.mask = None;
    }

    /// Appends `o`'s rows.
    pub fn extend(&mut self, o: RowsCache) {
        self.rows.extend(o.rows);
    }

    /// Each row's offset.
    pub fn offsets(&self) -> Vec<i64> {
        self.rows.iter().map(|c| c.lock().offset()).collect()
    }

    fn attend_rows(&self, q: Array, kv: Option<(Array, Array)>, args: &AttnArgs) -> Result<Array> {
        let mut outs = Vec::with_capacity(self.rows.len());
        for (r, c) in self.rows.iter().enumerate() {
            let qr = row(&q, r)?;
            let o = match &kv {
                Some((k, v)) => c.lock_promoted()?.attend(qr, row(k, r)?, row(v, r)?, args)?,
                None => c.lock().attend_cached(qr, args)?,
            };
            outs.push(o);
        }
        concatenate(&outs.iter().collect::<Vec<_>>(), 0)
    }

    fn update_rows(&mut self, k: Array, v: Array) -> Result<(Array, Array)> {
        let mut ks = Vec::with_capacity(self.rows.len());
        let mut vs = Vec::with_capacity(self.rows.len());
        for (r, c) in self.rows.iter().enumerate() {
            let (kr, vr) = c.lock_promoted()?.update(row(&k, r)?, row(&v, r)?)?;
            ks.push(kr);
            vs.push(vr);
        }
        let lens: Vec<i32> = ks.iter().map(|k| k.dim(2)).collect();
        let longest = lens.iter().copied().max().unwrap_or(0);
        self.mask = right_aligned_mask(&lens, longest)?;
        if self.mask.is_some() {
            let pad = |x: &Array, n: i32| -> Result<Array> {
                if n == longest {
                    return Ok(x.clone());
                }
                let zero = Array::f32(0.0).astype(x.dtype())?;
                x.pad(&[2], &[longest - n], &[0], &zero, "constant")
            };
            ks = ks.iter().zip(&lens).map(|(x, &n)| pad(x, n)).collect::<Result<_>>()?;
            vs = vs.iter().zip(&lens).map(|(x, &n)| pad(x, n)).collect::<Result<_>>()?;
        }
        Ok((concatenate(&ks.iter().collect::<Vec<_>>(), 0)?, concatenate(&vs.iter().collect::<Vec<_>>(), 0)?))
    }
}

impl LayerCache for RowsCache {
    fn offset(&self) -> i64 {
        self.rows.iter().map(|c| c.lock().offset()).max().unwrap_or(0)
    }
    fn attend(
        &mut self,
        q: ArrayHandle,
        k: ArrayHandle,
        v: ArrayHandle,
        opts: AttnOptions,
    ) -> RResult<ArrayHandle, PluginError> {
        let args: AttnArgs = opts.into();
        ffi(self.attend_rows(q.into_array(), Some((k.into_array(), v.into_array())), &args).map(ArrayHandle::from))
    }
    fn attend_cached(&self, q: ArrayHandle, opts: AttnOptions) -> RResult<ArrayHandle, PluginError> {
        ffi(self.attend_rows(q.into_array(), None, &opts.into()).map(ArrayHandle::from))
    }
    fn update_and_fetch(
        &mut self,
        k: ArrayHandle,
        v: ArrayHandle,
    ) -> RResult<Tuple2<ArrayHandle, ArrayHandle>, PluginError> {
        ffi(self.update_rows(k.into_array(), v.into_array()).map(|(k, v)| Tuple2(k.into(), v.into())))
    }
    fn state(&self) -> RVec<ArrayHandle> {
        let per_row: Vec<Vec<Array>> = self.rows.iter().map(|c| c.lock().state()).collect();
        let n = per_row.first().map_or(0, Vec::len);
        if n == 0 || per_row.iter().any(|s| s.len() != n) {
            return RVec::new();
        }
        (0..n)
            .filter_map(|i| concatenate(&per_row.iter().map(|s| &s[i]).collect::<Vec<_>>(), 0).ok())
            .map(ArrayHandle::from)
            .collect()
    }
    fn set_state(&mut self, state: RVec<ArrayHandle>, tokens: i64) -> RResult<(), PluginError> {
        let state: Vec<Array> = state.into_iter().map(ArrayHandle::into_array).collect();
        let r = (|| {
            for (r, c) in self.rows.iter().enumerate() {
                let mine = state.iter().map(|s| row(s, r)).collect::<Result<Vec<_>>>()?;
                c.lock().set_state(mine, tokens)?;
            }
            Ok::<_, Error>(())
        })();
        ffi(r)
    }
    fn row_offsets(&self) -> ROption<ArrayHandle> {
        offsets_handle(self.offsets())
    }
    fn row_mask(&self) -> ROption<ArrayHandle> {
        self.mask.clone().map(ArrayHandle::from).into()
    }
}
