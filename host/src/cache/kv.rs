//! The dense KV cache: pre-allocated buffers that grow geometrically, written
//! in place with slice updates (no per-step concatenation).

use super::layer::{field, tensor, CacheImpl, Pack, SavedCache};
use super::quantized::QuantizedKvCache;
use super::store::KvQuant;
use mlx::{zeros, Array, Result};
use serde_json::{json, Value};
use std::collections::HashMap;

/// Smallest growth step in tokens.
const STEP: i32 = 256;

/// Dense keys and values of every position.
#[derive(Clone, Default)]
pub struct KvCache {
    keys: Option<Array>,
    values: Option<Array>,
    offset: i64,
    /// Turn into a quantized cache once due.
    quant: Option<KvQuant>,
}

impl KvCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty cache that becomes a [`QuantizedKvCache`] once `quant` is due.
    pub fn with_quant(quant: Option<KvQuant>) -> Self {
        KvCache { quant, ..Self::default() }
    }

    /// Rebuilds a cache [`CacheImpl::save`] wrote; its buffers hold exactly
    /// the saved positions and grow on the next update.
    pub fn load(meta: &Value, arrays: &HashMap<String, Array>) -> Result<Self> {
        let offset: i64 = field(meta, "offset")?;
        let (keys, values) =
            if offset > 0 { (Some(tensor(arrays, "keys")?), Some(tensor(arrays, "values")?)) } else { (None, None) };
        Ok(KvCache { keys, values, offset, quant: field(meta, "quant")? })
    }

    /// A cache holding exactly `kv` (`[1, H, n, D]` keys and values).
    pub fn from_kv(kv: Option<(Array, Array)>) -> Self {
        match kv {
            Some((k, v)) => KvCache { offset: k.dim(2) as i64, keys: Some(k), values: Some(v), quant: None },
            None => KvCache::new(),
        }
    }

    fn capacity(&self) -> i64 {
        self.keys.as_ref().map_or(0, |k| k.dim(2) as i64)
    }

    fn grow(&mut self, k: &Array, v: &Array, need: i64) -> Result<()> {
        let cap = self.capacity();
        // Double (at least one step) so long generations reallocate O(log n) times.
        let new_cap = need.max(cap * 2).max(STEP as i64);
        let new_cap = ((new_cap + STEP as i64 - 1) / STEP as i64 * STEP as i64) as i32;
        let (b, h, dk, dv) = (k.dim(0), k.dim(1), k.dim(3), v.dim(3));
        let mut nk = zeros(&[b, h, new_cap, dk], k.dtype())?;
        let mut nv = zeros(&[b, h, new_cap, dv], v.dtype())?;
        if let (Some(ok), Some(ov)) = (&self.keys, &self.values) {
            let off = self.offset as i32;
            let ok = ok.slice_axis(2, 0, off)?;
            let ov = ov.slice_axis(2, 0, off)?;
            nk = nk.slice_update(&ok, &[0, 0, 0, 0], &[b, h, off, dk], &[1, 1, 1, 1])?;
            nv = nv.slice_update(&ov, &[0, 0, 0, 0], &[b, h, off, dv], &[1, 1, 1, 1])?;
        }
        self.keys = Some(nk);
        self.values = Some(nv);
        Ok(())
    }
}

impl CacheImpl for KvCache {
    fn offset(&self) -> i64 {
        self.offset
    }

    fn promote(&mut self) -> Result<Option<Box<dyn CacheImpl>>> {
        match self.quant {
            Some(q) if q.due(self.offset) => {
                let bufs = self.keys.clone().zip(self.values.clone());
                Ok(Some(Box::new(QuantizedKvCache::from_dense(bufs, self.offset, q)?)))
            }
            _ => Ok(None),
        }
    }

    fn update(&mut self, k: Array, v: Array) -> Result<(Array, Array)> {
        let l = k.dim(2) as i64;
        let need = self.offset + l;
        if need > self.capacity() {
            self.grow(&k, &v, need)?;
        }
        let (b, h, dk, dv) = (k.dim(0), k.dim(1), k.dim(3), v.dim(3));
        let (s, e) = (self.offset as i32, need as i32);
        let keys = self.keys.as_ref().expect("grown").slice_update(&k, &[0, 0, s, 0], &[b, h, e, dk], &[1, 1, 1, 1])?;
        let values =
            self.values.as_ref().expect("grown").slice_update(&v, &[0, 0, s, 0], &[b, h, e, dv], &[1, 1, 1, 1])?;
        self.offset = need;
        let out = (keys.slice_axis(2, 0, e)?, values.slice_axis(2, 0, e)?);
        self.keys = Some(keys);
        self.values = Some(values);
        Ok(out)
    }

    fn pack(&self) -> Option<Pack> {
        // A pending quantization changes the kind mid-batch: such caches stay per row.
        if self.quant.is_some() {
            return None;
        }
        self.fetch().ok().map(Pack::Kv)
    }

    fn fetch(&self) -> Result<Option<(Array, Array)>> {
        match (&self.keys, &self.values) {
            (Some(k), Some(v)) if self.offset > 0 => {
                let e = self.offset as i32;
                Ok(Some((k.slice_axis(2, 0, e)?, v.slice_axis(2, 0, e)?)))
            }
            _ => Ok(None),
        }
    }

    fn arrays(&self) -> Vec<Array> {
        self.keys.iter().chain(self.values.iter()).cloned().collect()
    }

    fn trim(&mut self, n: i64) -> i64 {
        let n = n.min(self.offset).max(0);
        self.offset -= n;
        n
    }

    fn can_trim(&self, n: i64) -> bool {
        n <= self.offset
    }

    fn can_trim_after(&self, added: i64, n: i64) -> bool {
        // Quantizing on the way would make the dense tail unrecoverable.
        self.quant.is_none() && n <= self.offset + added
    }

    fn snapshot(&self) -> Box<dyn CacheImpl> {
        // Arrays are immutable graph nodes: sharing them is a cheap, exact copy.
        Box::new(self.clone())
    }

    fn save(&self) -> Result<SavedCache> {
        let arrays = match self.fetch()? {
            Some((k, v)) => vec![("keys".into(), k), ("values".into(), v)],
            None => Vec::new(),
        };
        // The pending quantization travels too, so the loaded cache converts when this one would have.
        let meta = json!({"kind": "kv", "offset": self.offset, "quant": self.quant});
        Ok((arrays, meta))
    }
}
