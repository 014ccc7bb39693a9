//! The rotating (sliding-window) KV cache: at most `max_size` positions, the
//! first `keep` pinned, the rest a ring buffer written in place one token at
//! a time. Dense or quantized storage (a quantized rotating cache).
//!
//! Semantics follow mlx-lm's `RotatingKVCache`, so the same tokens come out:
//! - one new token overwrites the oldest unpinned slot and attends the whole
//!   buffer (keep + the last `max_size - keep` positions, itself included);
//! - a chunk of L > 1 tokens attends the pinned prefix and the newest
//!   `max_size - 1 - keep` cached positions (in temporal order) plus itself,
//!   under a mask that is causal and `max_size` wide in that concatenation.

use super::attn::KvMask;
use super::attn::{attend, window_mask, AttnArgs};
use super::layer::{field, CacheImpl, Pack, SavedCache};
use super::store::KvQuant;
use super::store::{Kv, QBits};
use mlx::{Array, Error, Result};
use serde_json::{json, Value};
use std::collections::HashMap;

/// First allocation in tokens (capped by the window).
const STEP: i32 = 256;

/// A bounded KV cache.
#[derive(Clone)]
pub struct RotatingKvCache {
    /// Slots `[0, len)` are valid; capacity is `buf.len()` (≤ `max_size` after every update).
    buf: Option<Kv>,
    len: i32,
    /// Next slot a single token is written to (`len` until the ring is full).
    idx: i32,
    offset: i64,
    max_size: i32,
    keep: i32,
    quant: Option<KvQuant>,
    /// Whether the storage has been quantized.
    packed: bool,
    /// The mask for the queries of the last update.
    mask: KvMask,
}

impl RotatingKvCache {
    /// A window of `max_size` positions with the first `keep` pinned
    /// (`keep < max_size`); `quant` makes it quantize once due.
    pub fn new(max_size: usize, keep: usize, quant: Option<KvQuant>) -> Result<Self> {
        if max_size == 0 || keep >= max_size {
            return Err(Error::msg(format!(
                "rotating cache: need 0 <= keep < max_size, got keep {keep}, max_size {max_size}"
            )));
        }
        let Ok(max_size) = i32::try_from(max_size) else {
            return Err(Error::msg(format!("rotating cache: a window of {max_size} tokens is more than {}", i32::MAX)));
        };
        Ok(RotatingKvCache {
            buf: None,
            len: 0,
            idx: 0,
            offset: 0,
            max_size,
            keep: keep as i32,
            quant,
            packed: false,
            mask: KvMask::None,
        })
    }

    /// Rebuilds a cache [`CacheImpl::save`] wrote: the valid slots in ring
    /// order with the write index, so the next token lands where it would have.
    pub fn load(meta: &Value, arrays: &HashMap<String, Array>) -> Result<Self> {
        let max_size: usize = field(meta, "max_size")?;
        let mut c = RotatingKvCache::new(max_size, field(meta, "keep")?, field(meta, "quant")?)?;
        c.packed = field(meta, "packed")?;
        c.offset = field(meta, "offset")?;
        c.len = field(meta, "len")?;
        c.idx = field(meta, "idx")?;
        if c.len < 0 || c.len > c.max_size || c.idx < 0 || c.idx > c.max_size {
            return Err(Error::msg(format!(
                "rotating cache: slots {} / write index {} do not fit a window of {}",
                c.len, c.idx, c.max_size
            )));
        }
        if c.len > 0 {
            c.buf = Some(Kv::from_named(arrays, c.packing())?);
        }
        Ok(c)
    }

    /// A window holding `k`/`v` (`[1, H, n, D]`, `n <= max_size`, oldest
    /// first) as the newest positions of `offset` seen: what a batch that
    /// stacked this kind of cache writes back. The next token goes after
    /// them, or over the oldest once the window is full.
    pub fn from_window(k: Array, v: Array, offset: i64, max_size: i32) -> Result<Self> {
        let n = k.dim(2);
        if n > max_size || n as i64 > offset {
            return Err(Error::msg(format!(
                "rotating cache: {n} keys for a window of {max_size} at position {offset}"
            )));
        }
        let mut c = RotatingKvCache::new(max_size as usize, 0, None)?;
        if n > 0 {
            c.buf = Some(Kv::pack(&k, &v, (None, None))?);
        }
        c.len = n;
        c.idx = n;
        c.offset = offset;
        Ok(c)
    }

    /// The window length.
    pub fn max_size(&self) -> usize {
        self.max_size as usize
    }

    /// Whether positions have been dropped (the window has slid).
    fn dropped(&self) -> bool {
        self.offset > self.len as i64
    }

    fn packing(&self) -> (Option<QBits>, Option<QBits>) {
        match (&self.quant, self.packed) {
            (Some(q), true) => (q.k, q.v),
            _ => (None, None),
        }
    }

    /// The valid slots as the attention sees them (ring order).
    fn held(&self) -> Result<Option<Kv>> {
        match &self.buf {
            Some(b) if self.len > 0 => Ok(Some(b.slice(0, self.len)?)),
            _ => Ok(None),
        }
    }

    /// The valid slots in temporal order: the pinned prefix, then the rest
    /// oldest first.
    fn ordered(&self) -> Result<Option<Kv>> {
        let Some(b) = &self.buf else { return Ok(None) };
        if self.len == 0 {
            return Ok(None);
        }
        let (keep, len, idx) = (self.keep, self.len, self.idx);
        Ok(Some(if self.dropped() && idx != keep && idx != len {
            // Oldest unpinned slot is `idx`: pinned, then idx.., then keep..idx.
            Kv::concat(&[b.slice(0, keep)?, b.slice(idx, len)?, b.slice(keep, idx)?])?
        } else {
            b.slice(0, len)?
        }))
    }

    /// [`Self::ordered`], cut to the pinned prefix and the newest
    /// `max_size - 1 - keep` positions (room for at least one new one).
    fn ordered_for_chunk(&self) -> Result<Option<Kv>> {
        let Some(ordered) = self.ordered()? else { return Ok(None) };
        let (keep, len) = (self.keep, self.len);
        let room = self.max_size - 1;
        if len > room {
            return Ok(Some(Kv::concat(&[ordered.slice(0, keep)?, ordered.slice(len - (room - keep), len)?])?));
        }
        Ok(Some(ordered))
    }

    fn put_one(&mut self, new: Kv) -> Result<Kv> {
        if self.buf.is_none() {
            self.buf = Some(new.zeros_like(self.max_size.min(STEP))?);
            self.len = 0;
            self.idx = 0;
        }
        let buf = self.buf.take().expect("allocated");
        let cap = buf.len();
        let buf = if self.len < self.max_size {
            // Still filling: grow geometrically up to the window.
            let buf = if self.len >= cap {
                buf.with_capacity(self.len, self.max_size.min((cap * 2).max(self.len + 1)))?
            } else {
                buf
            };
            let buf = buf.write(self.len, &new)?;
            self.len += 1;
            self.idx = self.len;
            buf
        } else {
            if self.idx >= self.max_size {
                self.idx = self.keep;
            }
            let buf = buf.write(self.idx, &new)?;
            self.idx += 1;
            buf
        };
        self.offset += 1;
        self.mask = KvMask::None;
        let out = buf.slice(0, self.len)?;
        self.buf = Some(buf);
        Ok(out)
    }

    fn put_chunk(&mut self, new: Kv) -> Result<Kv> {
        let n = new.len();
        let old = self.ordered_for_chunk()?;
        let old_len = old.as_ref().map_or(0, Kv::len);
        let full = match old {
            Some(o) => Kv::concat(&[o, new])?,
            None => new,
        };
        self.mask = if old_len + n > self.max_size {
            KvMask::Array(window_mask(n, old_len, self.max_size)?)
        } else {
            KvMask::Causal
        };
        let total = old_len + n;
        if total > self.max_size {
            // Keep the pinned prefix and the newest positions; the oldest unpinned slot is next.
            let tail = self.max_size - self.keep;
            self.buf = Some(Kv::concat(&[full.slice(0, self.keep)?, full.slice(total - tail, total)?])?);
            self.len = self.max_size;
            self.idx = self.keep;
        } else {
            self.buf = Some(full.clone());
            self.len = total;
            self.idx = total;
        }
        self.offset += n as i64;
        Ok(full)
    }

    fn append(&mut self, k: &Array, v: &Array) -> Result<Kv> {
        let new = Kv::pack(k, v, self.packing())?;
        if new.len() == 1 {
            self.put_one(new)
        } else {
            self.put_chunk(new)
        }
    }
}

impl CacheImpl for RotatingKvCache {
    fn offset(&self) -> i64 {
        self.offset
    }

    fn promote(&mut self) -> Result<Option<Box<dyn CacheImpl>>> {
        // Quantize in place once due (mlx-lm's maybe_quantize_kv_cache; mlx-lm
        // itself cannot quantize a rotating cache).
        if let Some(q) = self.quant {
            if !self.packed && q.due(self.offset) {
                self.buf = self.buf.as_ref().map(|b| b.packed((q.k, q.v))).transpose()?;
                self.packed = true;
            }
        }
        Ok(None)
    }

    fn update(&mut self, k: Array, v: Array) -> Result<(Array, Array)> {
        self.append(&k, &v)?.dense()
    }

    fn attend(&mut self, q: Array, k: Array, v: Array, args: &AttnArgs) -> Result<Array> {
        let kv = self.append(&k, &v)?;
        attend(&q, &kv.k, &kv.v, args, self.mask.clone())
    }

    fn attend_cached(&self, q: Array, args: &AttnArgs) -> Result<Array> {
        let kv = self.held()?.ok_or_else(|| Error::msg("attend_cached: the cache is empty"))?;
        // A query at the next position (a drafter reading this cache) sees
        // the window it would see as a new token, minus itself: once the
        // ring is full that excludes the oldest unpinned slot (the one the
        // next token would overwrite).
        let auto = if q.dim(2) == 1 && self.len == self.max_size {
            let oldest = if self.idx >= self.max_size { self.keep } else { self.idx };
            let slots = mlx::arange(0.0, self.len as f64, 1.0, mlx::Dtype::I32)?;
            KvMask::Array(slots.ne(&Array::i32(oldest))?.reshape(&[1, self.len])?)
        } else {
            KvMask::None
        };
        attend(&q, &kv.k, &kv.v, args, auto)
    }

    fn fetch(&self) -> Result<Option<(Array, Array)>> {
        self.held()?.map(|kv| kv.dense()).transpose()
    }

    fn pack(&self) -> Option<Pack> {
        // Pinned slots and (pending) quantization stay per row.
        if self.keep != 0 || self.quant.is_some() {
            return None;
        }
        let kv = self.ordered().ok()??.dense().ok()?;
        Some(Pack::Window(kv, self.offset, self.max_size))
    }

    fn mask_for(&self, _l: i32) -> Result<KvMask> {
        Ok(self.mask.clone())
    }

    fn arrays(&self) -> Vec<Array> {
        self.buf.as_ref().map(Kv::arrays).unwrap_or_default()
    }

    fn trim(&mut self, n: i64) -> i64 {
        // Once the window has slid, the positions before it are gone: no exact rewind.
        if self.dropped() {
            return 0;
        }
        let n = n.clamp(0, self.len as i64);
        self.len -= n as i32;
        self.idx = self.len;
        self.offset -= n;
        n
    }

    fn can_trim(&self, n: i64) -> bool {
        // Quantized storage cannot go back to dense: exact only down to where quantizing was due.
        let exact_from = match (&self.quant, self.packed) {
            (Some(q), true) => q.start.max(1),
            _ => 0,
        };
        n == 0 || (!self.dropped() && n <= self.offset && self.offset - n >= exact_from)
    }

    fn can_trim_after(&self, added: i64, n: i64) -> bool {
        // Exact while nothing has left the window.
        self.quant.is_none() && self.offset + added <= self.max_size as i64 && n <= self.offset + added
    }

    fn snapshot(&self) -> Box<dyn CacheImpl> {
        Box::new(self.clone())
    }

    fn save(&self) -> Result<SavedCache> {
        let arrays = self.held()?.map(|kv| kv.named()).unwrap_or_default();
        let meta = json!({
            "kind": "rotating",
            "offset": self.offset,
            "len": self.len,
            "idx": self.idx,
            "max_size": self.max_size,
            "keep": self.keep,
            "quant": self.quant,
            "packed": self.packed,
        });
        Ok((arrays, meta))
    }
}
