//! What every host cache kind implements ([`CacheImpl`]), and the helpers
//! that read a saved cache back.

use super::attn::{self, AttnArgs, KvMask};
use super::store::Seq;
use mlx::{Array, Error, Result};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::collections::HashMap;

/// A cache as written to a file: its arrays by field name, cut to the valid
/// positions, and the JSON that [`crate::cache::load`] rebuilds it from (`kind`, `offset`
/// and whatever else the kind needs).
pub type SavedCache = (Vec<(String, Array)>, Value);

/// A cache's content as a batch stacks it (see [`CacheImpl::pack`]).
pub enum Pack {
    /// Dense keys and values `[1, H, offset, D]` (none when empty).
    Kv(Option<(Array, Array)>),
    /// A recurrent state and the tokens it has seen.
    State(Vec<Array>, i64),
    /// A sliding window's keys and values in temporal order `[1, H, n, D]`,
    /// the tokens seen, and the window (at most that many newest kept).
    Window((Array, Array), i64, i32),
}

/// What every host cache kind implements.
pub trait CacheImpl: Send {
    /// Tokens seen.
    fn offset(&self) -> i64;
    /// Appends k/v, returning everything attendable (dense) for the new queries.
    fn update(&mut self, k: Array, v: Array) -> Result<(Array, Array)>;
    /// The cached k/v (dense), without appending.
    fn fetch(&self) -> Result<Option<(Array, Array)>>;
    /// Recurrent state (empty for KV caches).
    fn state(&self) -> Vec<Array> {
        Vec::new()
    }
    /// Replaces the recurrent state.
    fn set_state(&mut self, _s: Vec<Array>, _tokens: i64) -> Result<()> {
        Err(mlx::Error::msg("this cache kind holds no recurrent state"))
    }
    /// Arrays to evaluate after a prefill chunk.
    fn arrays(&self) -> Vec<Array>;
    /// Drops the last `n` tokens; returns how many were dropped (0 when this
    /// kind cannot drop them at all, e.g. a window that has slid).
    fn trim(&mut self, n: i64) -> i64;
    /// Whether [`CacheImpl::trim`] of `n` tokens gives exactly the state of
    /// never having fed them.
    fn can_trim(&self, n: i64) -> bool;
    /// Whether, once `added` more tokens are appended, trimming `n` of them
    /// will still be exact (speculative decoding asks before its verify
    /// forward, to know whether it needs a snapshot). No by default.
    fn can_trim_after(&self, _added: i64, _n: i64) -> bool {
        false
    }
    /// A cheap copy to restore later.
    fn snapshot(&self) -> Box<dyn CacheImpl>;
    /// What a file needs to rebuild this cache exactly (see [`crate::cache::load`]).
    fn save(&self) -> Result<SavedCache>;
    /// Attention mask for `l` new queries given the keys [`CacheImpl::update`] returned.
    fn mask_for(&self, l: i32) -> Result<KvMask> {
        Ok(if l > 1 { KvMask::Causal } else { KvMask::None })
    }
    /// Applies a due change of representation before the next update
    /// (mlx-lm's `maybe_quantize_kv_cache`): returns a replacement cache when
    /// the kind changes; a kind that converts in place returns `None`.
    fn promote(&mut self) -> Result<Option<Box<dyn CacheImpl>>> {
        Ok(None)
    }
    /// Appends `k`/`v` and attends `q` (`[B, Hq, L, D]`) over everything
    /// attendable. Kinds with packed storage override it to attend on the
    /// packed data.
    fn attend(&mut self, q: Array, k: Array, v: Array, args: &AttnArgs) -> Result<Array> {
        let l = q.dim(2);
        let (k, v) = self.update(k, v)?;
        let auto = self.mask_for(l)?;
        attn::attend(&q, &Seq::Dense(k), &Seq::Dense(v), args, auto)
    }
    /// This cache's content in a form a running batch stacks with other
    /// rows' (dense keys and values, a recurrent state); `None` (the
    /// default) keeps it per row in the batch.
    fn pack(&self) -> Option<Pack> {
        None
    }
    /// Attends `q` over what is cached, without appending.
    fn attend_cached(&self, q: Array, args: &AttnArgs) -> Result<Array> {
        let (k, v) = self.fetch()?.ok_or_else(|| Error::msg("attend_cached: the cache is empty"))?;
        attn::attend(&q, &Seq::Dense(k), &Seq::Dense(v), args, KvMask::None)
    }
}

/// A field of a saved cache's metadata.
pub(crate) fn field<T: DeserializeOwned>(meta: &Value, key: &str) -> Result<T> {
    let v = meta.get(key).cloned().unwrap_or(Value::Null);
    serde_json::from_value(v).map_err(|e| Error::msg(format!("cache metadata field `{key}`: {e}")))
}

/// Array `name` of a saved cache.
pub(crate) fn tensor(arrays: &HashMap<String, Array>, name: &str) -> Result<Array> {
    arrays.get(name).cloned().ok_or_else(|| Error::msg(format!("missing tensor {name}")))
}
