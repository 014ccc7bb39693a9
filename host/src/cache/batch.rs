//! The caches of a running batch. Each sequence owns its caches while it
//! is prefilled and after it leaves; while it decodes in the batch, its
//! dense keys/values, sliding windows that pin nothing (in temporal order,
//! each row keeping its newest `window` keys) and recurrent states are
//! stacked with the other rows' (one buffer per slot, rows padded on the
//! left), so a step's attention is one call for all rows. Joining stacks a
//! row in, leaving writes it back into its own caches; kinds that do not
//! stack (quantized, windows with a pinned prefix) stay per row
//! ([`RowsCache`]).

use super::attn::{attend, AttnArgs, KvMask};
use super::kv::KvCache;
use super::layer::Pack;
use super::recurrent::RecurrentCache;
use super::rotating::RotatingKvCache;
use super::rows::{ffi, offsets_handle, right_aligned_mask, RowsCache};
use super::shared::SharedCache;
use super::store::Seq;
use abi_stable::sabi_trait::TD_Opaque;
use abi_stable::std_types::{RErr, ROk, ROption, RResult, RVec, Tuple2};
use mlx::{concatenate, Array, Error, Result};
use plugin_api::abi::{ArrayHandle, CacheBox, LayerCache, LayerCache_TO, PluginError};
use plugin_api::AttnOptions;
use std::sync::{Arc, Mutex, MutexGuard};

/// Columns a stacked buffer grows by.
const GROW: i32 = 256;

/// Dense keys and values of all rows: row `r`'s `lens[r]` keys sit in
/// columns `end - lens[r] .. end` of `[B, H, cap, D]` buffers. With a
/// `window` (rows of sliding-window caches, in temporal order) a row keeps
/// at most that many keys, the newest: the ones its own rotating cache
/// would hold; `dropped[r]` counts the positions it no longer holds.
struct Dense {
    k: Array,
    v: Array,
    end: i32,
    lens: Vec<i32>,
    dropped: Vec<i64>,
    window: Option<i32>,
    mask: Option<Array>,
}

/// Recurrent states of all rows, stacked on axis 0.
struct States {
    state: Vec<Array>,
    offsets: Vec<i64>,
}

enum Slot {
    Dense(Dense),
    States(States),
    Rows(RowsCache),
}

fn cat(xs: &[Array], axis: i32) -> Result<Array> {
    if xs.len() == 1 {
        return Ok(xs[0].clone());
    }
    concatenate(&xs.iter().collect::<Vec<_>>(), axis)
}

impl Dense {
    /// Stacks rows' keys/values (`[1, H, n, D]`; all present), each row at
    /// position `dropped + n` (the positions before it no longer held), all
    /// keeping the last `window` keys when there is one.
    fn stack(kv: Vec<(Array, Array)>, dropped: Vec<i64>, window: Option<i32>) -> Result<Dense> {
        let lens: Vec<i32> = kv.iter().map(|(k, _)| k.dim(2)).collect();
        let end = lens.iter().copied().max().unwrap_or(0);
        let cap = (end / GROW + 1) * GROW;
        let pad = |x: &Array, n: i32| -> Result<Array> {
            let zero = Array::f32(0.0).astype(x.dtype())?;
            x.pad(&[2], &[end - n], &[cap - end], &zero, "constant")
        };
        let ks: Vec<Array> = kv.iter().zip(&lens).map(|((k, _), &n)| pad(k, n)).collect::<Result<_>>()?;
        let vs: Vec<Array> = kv.iter().zip(&lens).map(|((_, v), &n)| pad(v, n)).collect::<Result<_>>()?;
        let mask = right_aligned_mask(&lens, end)?;
        Ok(Dense { k: cat(&ks, 0)?, v: cat(&vs, 0)?, end, lens, dropped, window, mask })
    }

    fn cap(&self) -> i32 {
        self.k.dim(2)
    }

    /// Row `r`'s keys and values, `[1, H, lens[r], D]`.
    fn row(&self, r: usize) -> Result<(Array, Array)> {
        let (a, b) = (r as i32, r as i32 + 1);
        let from = self.end - self.lens[r];
        let k = self.k.slice_axis(0, a, b)?.slice_axis(2, from, self.end)?;
        let v = self.v.slice_axis(0, a, b)?.slice_axis(2, from, self.end)?;
        Ok((k, v))
    }

    /// Keeps rows `keep` (in order), dropping left columns no row uses.
    fn keep(&mut self, keep: &[usize]) -> Result<()> {
        let idx = Array::from_slice(&keep.iter().map(|&i| i as i32).collect::<Vec<_>>(), &[keep.len() as i32])?;
        self.k = self.k.take(&idx, 0)?;
        self.v = self.v.take(&idx, 0)?;
        self.lens = keep.iter().map(|&i| self.lens[i]).collect();
        self.dropped = keep.iter().map(|&i| self.dropped[i]).collect();
        self.drop_unused()
    }

    /// Drops the left columns no row uses, once there are [`GROW`] of them.
    fn drop_unused(&mut self) -> Result<()> {
        let longest = self.lens.iter().copied().max().unwrap_or(0);
        let unused = self.end - longest;
        if unused >= GROW {
            let cap = self.cap();
            self.k = self.k.slice_axis(2, unused, cap)?;
            self.v = self.v.slice_axis(2, unused, cap)?;
            self.end -= unused;
        }
        Ok(())
    }

    /// Each row's position.
    fn offsets(&self) -> Vec<i64> {
        self.lens.iter().zip(&self.dropped).map(|(&n, &d)| n as i64 + d).collect()
    }

    /// Appends `o`'s rows after this one's, aligning their ends.
    fn extend(&mut self, o: Dense) -> Result<()> {
        let end = self.end.max(o.end);
        let align = |d: &Dense, x: &Array| -> Result<Array> {
            let zero = Array::f32(0.0).astype(x.dtype())?;
            let cap = (end / GROW + 1) * GROW;
            let right = cap - (d.cap() + end - d.end);
            if right >= 0 {
                x.pad(&[2], &[end - d.end], &[right], &zero, "constant")
            } else {
                x.pad(&[2], &[end - d.end], &[0], &zero, "constant")?.slice_axis(2, 0, cap)
            }
        };
        let k = cat(&[align(self, &self.k)?, align(&o, &o.k)?], 0)?;
        let v = cat(&[align(self, &self.v)?, align(&o, &o.v)?], 0)?;
        self.k = k;
        self.v = v;
        self.end = end;
        self.lens.extend(o.lens);
        self.dropped.extend(o.dropped);
        Ok(())
    }

    /// Appends `k`/`v` (`[B, H, L, D]`) to every row; returns all columns in use.
    fn update(&mut self, k: &Array, v: &Array) -> Result<(Array, Array)> {
        let l = k.dim(2);
        if self.window.is_some() && l != 1 {
            return Err(Error::msg("internal: a sliding-window batch slot takes one token per row a step"));
        }
        if self.end + l > self.cap() {
            let more = ((self.end + l - self.cap()) / GROW + 1) * GROW;
            let zero = Array::f32(0.0).astype(self.k.dtype())?;
            self.k = self.k.pad(&[2], &[0], &[more], &zero, "constant")?;
            self.v = self.v.pad(&[2], &[0], &[more], &zero, "constant")?;
        }
        let (b, h, dk, dv) = (k.dim(0), k.dim(1), k.dim(3), v.dim(3));
        let (s, e) = (self.end, self.end + l);
        self.k = self.k.slice_update(k, &[0, 0, s, 0], &[b, h, e, dk], &[1, 1, 1, 1])?;
        self.v = self.v.slice_update(v, &[0, 0, s, 0], &[b, h, e, dv], &[1, 1, 1, 1])?;
        self.end = e;
        for (n, d) in self.lens.iter_mut().zip(&mut self.dropped) {
            *n += l;
            if let Some(w) = self.window {
                // The oldest key leaves the row's window, as from its ring.
                *d += (*n - w).max(0) as i64;
                *n = (*n).min(w);
            }
        }
        if self.window.is_some() {
            self.drop_unused()?;
        }
        let e = self.end;
        self.mask = right_aligned_mask(&self.lens, e)?;
        Ok((self.k.slice_axis(2, 0, e)?, self.v.slice_axis(2, 0, e)?))
    }

    /// Attends `q` over `kv` (the columns in use) with the padding mask.
    fn attend(&self, q: ArrayHandle, (k, v): (Array, Array), args: AttnArgs) -> Result<Array> {
        let mask = self.mask_for(&args)?;
        attend(&q.into_array(), &Seq::Dense(k), &Seq::Dense(v), &AttnArgs { mask: mask.clone(), ..args }, mask)
    }

    /// The mask of one query per row over the columns in use, with `args`' own.
    fn mask_for(&self, args: &AttnArgs) -> Result<KvMask> {
        Ok(match (&args.mask, &self.mask) {
            (KvMask::Array(m), Some(p)) => KvMask::Array(m.logical_and(p)?),
            (KvMask::Array(m), None) => KvMask::Array(m.clone()),
            (_, Some(p)) => KvMask::Array(p.clone()),
            (_, None) => KvMask::None,
        })
    }
}

impl States {
    fn row(&self, r: usize) -> Result<Vec<Array>> {
        self.state.iter().map(|s| s.slice_axis(0, r as i32, r as i32 + 1)).collect()
    }

    fn keep(&mut self, keep: &[usize]) -> Result<()> {
        let idx = Array::from_slice(&keep.iter().map(|&i| i as i32).collect::<Vec<_>>(), &[keep.len() as i32])?;
        self.state = self.state.iter().map(|s| s.take(&idx, 0)).collect::<Result<_>>()?;
        self.offsets = keep.iter().map(|&i| self.offsets[i]).collect();
        Ok(())
    }

    fn extend(&mut self, o: States) -> Result<()> {
        self.state =
            self.state.iter().zip(&o.state).map(|(a, b)| cat(&[a.clone(), b.clone()], 0)).collect::<Result<_>>()?;
        self.offsets.extend(o.offsets);
        Ok(())
    }
}

impl Slot {
    /// Slot `s` of `rows`, stacked when every row's cache packs the same way.
    fn gather(rows: &[Vec<SharedCache>], s: usize) -> Result<Slot> {
        let packs: Vec<Option<Pack>> = rows.iter().map(|r| r[s].lock().pack()).collect();
        // Keys and values stack when every row has them, all unbounded or
        // all windows of one size.
        let dense = |p: &Option<Pack>| match p {
            Some(Pack::Kv(Some(_))) => Some(None),
            Some(Pack::Window(_, _, w)) => Some(Some(*w)),
            _ => None,
        };
        if let Some(window) = packs.first().and_then(dense).filter(|w| packs.iter().all(|p| dense(p) == Some(*w))) {
            let (kv, dropped): (Vec<_>, Vec<_>) = packs
                .into_iter()
                .map(|p| match p {
                    Some(Pack::Kv(Some(kv))) => (kv, 0),
                    Some(Pack::Window(kv, offset, _)) => {
                        let dropped = offset - kv.0.dim(2) as i64;
                        (kv, dropped)
                    }
                    _ => unreachable!("checked above"),
                })
                .unzip();
            return Ok(Slot::Dense(Dense::stack(kv, dropped, window)?));
        }
        let n = match packs.first() {
            Some(Some(Pack::State(s, _))) => s.len(),
            _ => 0,
        };
        if n > 0 && packs.iter().all(|p| matches!(p, Some(Pack::State(s, _)) if s.len() == n)) {
            let mut cols: Vec<Vec<Array>> = vec![Vec::new(); n];
            let mut offsets = Vec::new();
            for p in packs {
                if let Some(Pack::State(st, off)) = p {
                    for (c, a) in cols.iter_mut().zip(st) {
                        c.push(a);
                    }
                    offsets.push(off);
                }
            }
            let state = cols.iter().map(|c| cat(c, 0)).collect::<Result<_>>()?;
            return Ok(Slot::States(States { state, offsets }));
        }
        Ok(Slot::Rows(RowsCache::new(rows.iter().map(|r| r[s].clone()).collect())))
    }

    /// Row `r`'s content back in its own cache `into`: copied out and
    /// evaluated, since a slice is a view that would keep the whole stacked
    /// buffer alive for as long as the row's cache (or a prompt-cache
    /// snapshot of it) lives.
    fn write_back(&self, r: usize, into: &SharedCache) -> Result<()> {
        let own = |xs: Vec<Array>| -> Result<Vec<Array>> {
            let xs: Vec<Array> = xs.iter().map(|x| x.contiguous()).collect::<Result<_>>()?;
            mlx::eval(&xs.iter().collect::<Vec<_>>())?;
            Ok(xs)
        };
        match self {
            Slot::Dense(d) => {
                let (k, v) = d.row(r)?;
                let kv = own(vec![k, v])?;
                let (k, v) = (kv[0].clone(), kv[1].clone());
                *into.lock() = match d.window {
                    Some(w) => Box::new(RotatingKvCache::from_window(k, v, d.offsets()[r], w)?),
                    None => Box::new(KvCache::from_kv(Some((k, v)))),
                };
            }
            Slot::States(st) => *into.lock() = Box::new(RecurrentCache::from_state(own(st.row(r)?)?, st.offsets[r])),
            // The row's own cache was updated in place.
            Slot::Rows(_) => {}
        }
        Ok(())
    }

    fn keep(&mut self, keep: &[usize]) -> Result<()> {
        match self {
            Slot::Dense(d) => d.keep(keep),
            Slot::States(s) => s.keep(keep),
            Slot::Rows(r) => {
                r.keep(keep);
                Ok(())
            }
        }
    }

    /// Appends `o`'s rows; false when the two do not stack alike (the
    /// caller then regathers).
    fn extend(&mut self, o: Slot) -> Result<bool> {
        match (self, o) {
            (Slot::Dense(a), Slot::Dense(b)) if a.window == b.window => a.extend(b).map(|_| true),
            (Slot::States(a), Slot::States(b)) if a.state.len() == b.state.len() => a.extend(b).map(|_| true),
            (Slot::Rows(a), Slot::Rows(b)) => {
                a.extend(b);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    fn offsets(&self) -> Vec<i64> {
        match self {
            Slot::Dense(d) => d.offsets(),
            Slot::States(s) => s.offsets.clone(),
            Slot::Rows(r) => r.offsets(),
        }
    }
}

/// The caches of the sequences decoding together, by row.
#[derive(Default)]
pub struct BatchCaches {
    members: Vec<(u64, Vec<SharedCache>)>,
    slots: Vec<Arc<Mutex<Slot>>>,
    /// What each row's rotary positions add to its offset (see
    /// [`BatchCaches::set_shifts`]); empty: nothing.
    shifts: Arc<Vec<i64>>,
}

impl BatchCaches {
    /// An empty batch.
    pub fn new() -> BatchCaches {
        BatchCaches::default()
    }

    /// The rows' ids, in batch order.
    pub fn ids(&self) -> Vec<u64> {
        self.members.iter().map(|m| m.0).collect()
    }

    /// Makes the batch hold exactly `rows` (an id and the sequence's own
    /// caches, in the order the step feeds them): rows no longer listed are
    /// written back into their caches and dropped, new ones stacked in.
    pub fn set_rows(&mut self, rows: &[(u64, &[SharedCache])]) -> Result<()> {
        let want: Vec<u64> = rows.iter().map(|r| r.0).collect();
        if want == self.ids() {
            return Ok(());
        }
        let leaving: Vec<u64> = self.ids().into_iter().filter(|id| !want.contains(id)).collect();
        for id in leaving {
            self.release(id)?;
        }
        let staying = self.ids();
        if !want.starts_with(&staying) {
            // Reordered: write everything back and start over.
            for id in staying {
                self.release(id)?;
            }
        }
        let new: Vec<(u64, Vec<SharedCache>)> =
            rows.iter().filter(|r| !self.ids().contains(&r.0)).map(|r| (r.0, r.1.to_vec())).collect();
        if new.is_empty() {
            return Ok(());
        }
        let caches: Vec<Vec<SharedCache>> = new.iter().map(|m| m.1.clone()).collect();
        let slots = (0..caches[0].len()).map(|s| Slot::gather(&caches, s)).collect::<Result<Vec<_>>>()?;
        if self.members.is_empty() {
            self.slots = slots.into_iter().map(|s| Arc::new(Mutex::new(s))).collect();
            self.members = new;
            return Ok(());
        }
        let old = self.members.len();
        let mut alike = true;
        for (mine, theirs) in self.slots.iter().zip(slots) {
            alike &= lock(mine).extend(theirs)?;
        }
        if !alike {
            // A cache changed kind (e.g. quantized on the way): write the
            // old rows back and stack everyone again from their own caches.
            for (r, (_, caches)) in self.members.iter().enumerate().take(old) {
                for (slot, c) in self.slots.iter().zip(caches) {
                    lock(slot).write_back(r, c)?;
                }
            }
            self.members.extend(new);
            let caches: Vec<Vec<SharedCache>> = self.members.iter().map(|m| m.1.clone()).collect();
            self.slots = (0..caches[0].len())
                .map(|s| Slot::gather(&caches, s).map(|x| Arc::new(Mutex::new(x))))
                .collect::<Result<_>>()?;
            return Ok(());
        }
        self.members.extend(new);
        Ok(())
    }

    /// What each row's rotary positions add to its cache offset, in batch
    /// order: a row past images that a family places in 2-D (M-RoPE)
    /// continues from its position delta, and its text tokens rope like
    /// plain text at the shifted position.
    pub fn set_shifts(&mut self, shifts: Vec<i64>) -> Result<()> {
        if shifts.len() != self.members.len() {
            return Err(Error::msg(format!("set_shifts: {} shifts for {} rows", shifts.len(), self.members.len())));
        }
        self.shifts = Arc::new(if shifts.iter().all(|&s| s == 0) { Vec::new() } else { shifts });
        Ok(())
    }

    /// Writes row `id` back into its own caches and drops it from the batch.
    pub fn release(&mut self, id: u64) -> Result<()> {
        let Some(r) = self.members.iter().position(|m| m.0 == id) else { return Ok(()) };
        for (slot, c) in self.slots.iter().zip(&self.members[r].1) {
            lock(slot).write_back(r, c)?;
        }
        self.members.remove(r);
        if self.members.is_empty() {
            self.slots.clear();
            return Ok(());
        }
        let keep: Vec<usize> = (0..=self.members.len()).filter(|&i| i != r).collect();
        for slot in &self.slots {
            lock(slot).keep(&keep)?;
        }
        Ok(())
    }

    /// The plugin's view of the batch for one forward.
    pub fn boxes(&self) -> RVec<CacheBox> {
        self.slots
            .iter()
            .map(|s| LayerCache_TO::from_value(SlotBox(s.clone(), self.shifts.clone()), TD_Opaque))
            .collect()
    }
}

fn lock(s: &Arc<Mutex<Slot>>) -> MutexGuard<'_, Slot> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// One slot as a plugin sees it during a step, with the rows' position
/// shifts.
struct SlotBox(Arc<Mutex<Slot>>, Arc<Vec<i64>>);

impl LayerCache for SlotBox {
    fn offset(&self) -> i64 {
        lock(&self.0).offsets().into_iter().max().unwrap_or(0)
    }
    fn attend(
        &mut self,
        q: ArrayHandle,
        k: ArrayHandle,
        v: ArrayHandle,
        opts: AttnOptions,
    ) -> RResult<ArrayHandle, PluginError> {
        let mut s = lock(&self.0);
        match &mut *s {
            Slot::Dense(d) => {
                let r = d.update(&k.into_array(), &v.into_array()).and_then(|kv| d.attend(q, kv, opts.into()));
                ffi(r.map(ArrayHandle::from))
            }
            Slot::Rows(r) => r.attend(q, k, v, opts),
            Slot::States(_) => RErr("attend: this slot holds a recurrent state".into()),
        }
    }
    fn attend_cached(&self, q: ArrayHandle, opts: AttnOptions) -> RResult<ArrayHandle, PluginError> {
        let s = lock(&self.0);
        match &*s {
            Slot::Dense(d) => {
                let r = d.k.slice_axis(2, 0, d.end).and_then(|k| Ok((k, d.v.slice_axis(2, 0, d.end)?)));
                ffi(r.and_then(|kv| d.attend(q, kv, opts.into())).map(ArrayHandle::from))
            }
            Slot::Rows(r) => r.attend_cached(q, opts),
            Slot::States(_) => RErr("attend_cached: this slot holds a recurrent state".into()),
        }
    }
    fn update_and_fetch(
        &mut self,
        k: ArrayHandle,
        v: ArrayHandle,
    ) -> RResult<Tuple2<ArrayHandle, ArrayHandle>, PluginError> {
        let mut s = lock(&self.0);
        match &mut *s {
            Slot::Dense(d) => ffi(d.update(&k.into_array(), &v.into_array()).map(|(k, v)| Tuple2(k.into(), v.into()))),
            Slot::Rows(r) => r.update_and_fetch(k, v),
            Slot::States(_) => RErr("update_and_fetch: this slot holds a recurrent state".into()),
        }
    }
    fn state(&self) -> RVec<ArrayHandle> {
        match &*lock(&self.0) {
            Slot::States(s) => s.state.iter().cloned().map(ArrayHandle::from).collect(),
            Slot::Rows(r) => r.state(),
            Slot::Dense(_) => RVec::new(),
        }
    }
    fn set_state(&mut self, state: RVec<ArrayHandle>, tokens: i64) -> RResult<(), PluginError> {
        let mut s = lock(&self.0);
        match &mut *s {
            Slot::States(st) => {
                if state.len() != st.state.len() {
                    return RErr(format!("set_state: {} arrays for a state of {}", state.len(), st.state.len()).into());
                }
                st.state = state.into_iter().map(ArrayHandle::into_array).collect();
                for o in &mut st.offsets {
                    *o += tokens;
                }
                ROk(())
            }
            Slot::Rows(r) => r.set_state(state, tokens),
            Slot::Dense(_) => RErr(Error::msg("set_state: this slot holds keys and values").into()),
        }
    }
    fn row_offsets(&self) -> ROption<ArrayHandle> {
        let offsets = lock(&self.0).offsets();
        if self.1.len() != offsets.len() {
            return offsets_handle(offsets);
        }
        // Shifted rows rope per row even when all offsets are alike.
        let shifted: Vec<i32> = offsets.iter().zip(self.1.iter()).map(|(o, s)| (o + s) as i32).collect();
        Array::from_slice(&shifted, &[shifted.len() as i32]).ok().map(ArrayHandle::from).into()
    }
    fn row_mask(&self) -> ROption<ArrayHandle> {
        match &*lock(&self.0) {
            Slot::Dense(d) => d.mask.clone().map(ArrayHandle::from).into(),
            Slot::Rows(r) => r.row_mask(),
            Slot::States(_) => ROption::RNone,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlx::Dtype;

    fn kv(n: i32) -> (Array, Array) {
        let z = mlx::zeros(&[1, 2, n, 4], Dtype::F32).unwrap();
        (z.clone(), z)
    }

    #[test]
    fn keep_then_extend_aligns_capacities() {
        let mut d = Dense::stack(vec![kv(600), kv(20), kv(30)], vec![0; 3], None).unwrap();
        d.keep(&[1, 2]).unwrap();
        for n in [300, 5, 1000] {
            let o = Dense::stack(vec![kv(n)], vec![0], None).unwrap();
            d.extend(o).unwrap();
            assert_eq!(d.k.dim(0) as usize, d.lens.len());
            let step = mlx::zeros(&[d.lens.len() as i32, 2, 1, 4], Dtype::F32).unwrap();
            let (k, v) = d.update(&step, &step).unwrap();
            mlx::eval(&[&k, &v]).unwrap();
            assert_eq!(k.shape(), v.shape());
            for r in 0..d.lens.len() {
                let (rk, rv) = d.row(r).unwrap();
                assert_eq!((rk.dim(2), rv.dim(2)), (d.lens[r], d.lens[r]));
            }
        }
    }
}
