//! The quantized KV cache: keys and values stored packed (uint32 data plus
//! per-group scales and biases), each with its own bit width, in buffers that
//! grow geometrically and are written in place like the dense cache's.

use super::attn::KvMask;
use super::attn::{attend, AttnArgs};
use super::layer::{field, CacheImpl, SavedCache};
use super::store::KvQuant;
use super::store::{Kv, QBits};
use mlx::{Array, Result};
use serde_json::{json, Value};
use std::collections::HashMap;

/// Smallest growth step in tokens.
const STEP: i32 = 256;

/// Packed keys and values of every position.
#[derive(Clone)]
pub struct QuantizedKvCache {
    buf: Option<Kv>,
    offset: i64,
    k: Option<QBits>,
    v: Option<QBits>,
    /// Trimming to fewer tokens than this would leave quantized what a run
    /// without the trimmed tokens would still hold dense.
    exact_from: i64,
}

impl QuantizedKvCache {
    /// An empty cache quantizing keys per `k` and values per `v` (None: kept dense).
    pub fn new(k: Option<QBits>, v: Option<QBits>) -> Self {
        QuantizedKvCache { buf: None, offset: 0, k, v, exact_from: 0 }
    }

    /// Converts dense buffers (`[B, H, capacity, D]`, the first `offset`
    /// positions valid) into a quantized cache, as `q` says is due.
    pub fn from_dense(buffers: Option<(Array, Array)>, offset: i64, q: KvQuant) -> Result<Self> {
        let buf = buffers.map(|(kb, vb)| Kv::pack(&kb, &vb, (q.k, q.v))).transpose()?;
        Ok(QuantizedKvCache { buf, offset, k: q.k, v: q.v, exact_from: q.start.max(1) })
    }

    /// Rebuilds a cache [`CacheImpl::save`] wrote.
    pub fn load(meta: &Value, arrays: &HashMap<String, Array>) -> Result<Self> {
        let offset: i64 = field(meta, "offset")?;
        let (k, v): (Option<QBits>, Option<QBits>) = (field(meta, "k")?, field(meta, "v")?);
        let buf = if offset > 0 { Some(Kv::from_named(arrays, (k, v))?) } else { None };
        Ok(QuantizedKvCache { buf, offset, k, v, exact_from: field(meta, "exact_from")? })
    }

    fn capacity(&self) -> i32 {
        self.buf.as_ref().map_or(0, Kv::len)
    }

    /// The valid positions.
    fn held(&self) -> Result<Option<Kv>> {
        match &self.buf {
            Some(b) if self.offset > 0 => Ok(Some(b.slice(0, self.offset as i32)?)),
            _ => Ok(None),
        }
    }

    /// Packs and appends `k`/`v`; returns every valid position.
    fn append(&mut self, k: &Array, v: &Array) -> Result<Kv> {
        let new = Kv::pack(k, v, (self.k, self.v))?;
        let (off, l) = (self.offset as i32, new.len());
        let need = off + l;
        if need > self.capacity() {
            // Double (at least one step) so long generations reallocate O(log n) times.
            let cap = need.max(self.capacity() * 2).max(STEP);
            let cap = (cap + STEP - 1) / STEP * STEP;
            self.buf = Some(match &self.buf {
                Some(b) => b.with_capacity(off, cap)?,
                None => new.zeros_like(cap)?,
            });
        }
        let buf = self.buf.as_ref().expect("allocated").write(off, &new)?;
        self.offset = need as i64;
        let out = buf.slice(0, need)?;
        self.buf = Some(buf);
        Ok(out)
    }
}

impl CacheImpl for QuantizedKvCache {
    fn offset(&self) -> i64 {
        self.offset
    }

    fn update(&mut self, k: Array, v: Array) -> Result<(Array, Array)> {
        self.append(&k, &v)?.dense()
    }

    fn attend(&mut self, q: Array, k: Array, v: Array, args: &AttnArgs) -> Result<Array> {
        let kv = self.append(&k, &v)?;
        let auto = if q.dim(2) > 1 { KvMask::Causal } else { KvMask::None };
        attend(&q, &kv.k, &kv.v, args, auto)
    }

    fn attend_cached(&self, q: Array, args: &AttnArgs) -> Result<Array> {
        let kv = self.held()?.ok_or_else(|| mlx::Error::msg("attend_cached: the cache is empty"))?;
        attend(&q, &kv.k, &kv.v, args, KvMask::None)
    }

    fn fetch(&self) -> Result<Option<(Array, Array)>> {
        self.held()?.map(|kv| kv.dense()).transpose()
    }

    fn arrays(&self) -> Vec<Array> {
        self.buf.as_ref().map(Kv::arrays).unwrap_or_default()
    }

    fn trim(&mut self, n: i64) -> i64 {
        let n = n.min(self.offset).max(0);
        self.offset -= n;
        n
    }

    fn can_trim(&self, n: i64) -> bool {
        n == 0 || (n <= self.offset && self.offset - n >= self.exact_from)
    }

    fn can_trim_after(&self, added: i64, n: i64) -> bool {
        let after = self.offset + added;
        n == 0 || (n <= after && after - n >= self.exact_from)
    }

    fn snapshot(&self) -> Box<dyn CacheImpl> {
        Box::new(self.clone())
    }

    fn save(&self) -> Result<SavedCache> {
        let arrays = self.held()?.map(|kv| kv.named()).unwrap_or_default();
        let meta = json!({
            "kind": "quantized",
            "offset": self.offset,
            "k": self.k,
            "v": self.v,
            "exact_from": self.exact_from,
        });
        Ok((arrays, meta))
    }
}
