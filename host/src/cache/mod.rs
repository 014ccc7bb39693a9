//! Host-owned per-layer caches, lent to plugins as [`CacheBox`] trait objects.
//!
//! The host keeps its own handle ([`SharedCache`]) to each cache so it can
//! evaluate, trim, snapshot and restore them between forward calls; the
//! plugin only sees the [`LayerCache`] interface. Kinds: dense ([`KvCache`]),
//! quantized ([`QuantizedKvCache`]), rotating / sliding-window, dense or
//! quantized ([`RotatingKvCache`]), and recurrent state ([`RecurrentCache`]).

mod attn;
mod kv;
mod quantized;
mod recurrent;
mod rotating;
mod store;

pub use attn::{causal_mask, window_mask, AttnArgs, MaskArg};
pub use kv::KvCache;
pub use quantized::QuantizedKvCache;
pub use recurrent::RecurrentCache;
pub use rotating::RotatingKvCache;
pub use store::{Kv, QBits, Seq};

use abi_stable::sabi_trait::TD_Opaque;
use abi_stable::std_types::{RErr, ROk, RResult, RString, RVec, Tuple2};
use mlx::{Array, Error, Result};
use plugin_api::{ArrayHandle, AttnMask, AttnOptions, CacheBox, CacheKind, LayerCache, LayerCache_TO};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// A cache as written to a file: its arrays by field name, cut to the valid
/// positions, and the JSON that [`load`] rebuilds it from (`kind`, `offset`
/// and whatever else the kind needs).
pub type SavedCache = (Vec<(String, Array)>, Value);

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
    /// What a file needs to rebuild this cache exactly (see [`load`]).
    fn save(&self) -> Result<SavedCache>;
    /// Attention mask for `l` new queries given the keys [`CacheImpl::update`] returned.
    fn mask_for(&self, l: i32) -> Result<MaskChoice> {
        Ok(if l > 1 { MaskChoice::Causal } else { MaskChoice::None })
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
    /// Attends `q` over what is cached, without appending.
    fn attend_cached(&self, q: Array, args: &AttnArgs) -> Result<Array> {
        let (k, v) = self.fetch()?.ok_or_else(|| Error::msg("attend_cached: the cache is empty"))?;
        attn::attend(&q, &Seq::Dense(k), &Seq::Dense(v), args, MaskChoice::None)
    }
}

/// The mask a cache needs for its last update.
#[derive(Clone)]
pub enum MaskChoice {
    /// No mask.
    None,
    /// Lower-right aligned causal.
    Causal,
    /// Explicit boolean mask.
    Array(Array),
}

/// A cache shared between the host and the plugin's view of it.
#[derive(Clone)]
pub struct SharedCache(pub Arc<Mutex<Box<dyn CacheImpl>>>);

impl SharedCache {
    /// Wraps a cache.
    pub fn new(c: Box<dyn CacheImpl>) -> Self {
        SharedCache(Arc::new(Mutex::new(c)))
    }
    /// Locks it.
    pub fn lock(&self) -> MutexGuard<'_, Box<dyn CacheImpl>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
    /// Locks it after applying a due change of representation.
    fn lock_promoted(&self) -> Result<MutexGuard<'_, Box<dyn CacheImpl>>> {
        let mut c = self.lock();
        if let Some(n) = c.promote()? {
            *c = n;
        }
        Ok(c)
    }
    /// The plugin-facing trait object.
    pub fn boxed(&self) -> CacheBox {
        LayerCache_TO::from_value(self.clone(), TD_Opaque)
    }
}

fn rerr(e: Error) -> RString {
    e.0.into()
}

fn ffi<T, U>(r: Result<T>, f: impl FnOnce(T) -> U) -> RResult<U, RString> {
    match r {
        Ok(x) => ROk(f(x)),
        Err(e) => RErr(rerr(e)),
    }
}

impl From<AttnOptions> for AttnArgs {
    fn from(o: AttnOptions) -> Self {
        AttnArgs {
            scale: o.scale,
            mask: match o.mask {
                AttnMask::Causal => MaskArg::Auto,
                AttnMask::None => MaskArg::None,
                AttnMask::Array(m) => MaskArg::Array(m.into_array()),
            },
            sinks: o.sinks.into_option().map(ArrayHandle::into_array),
        }
    }
}

impl LayerCache for SharedCache {
    fn offset(&self) -> i64 {
        self.lock().offset()
    }
    fn attend(
        &mut self,
        q: ArrayHandle,
        k: ArrayHandle,
        v: ArrayHandle,
        opts: AttnOptions,
    ) -> RResult<ArrayHandle, RString> {
        let r = self
            .lock_promoted()
            .and_then(|mut c| c.attend(q.into_array(), k.into_array(), v.into_array(), &opts.into()));
        ffi(r, ArrayHandle::from)
    }
    fn attend_cached(&self, q: ArrayHandle, opts: AttnOptions) -> RResult<ArrayHandle, RString> {
        ffi(self.lock().attend_cached(q.into_array(), &opts.into()), ArrayHandle::from)
    }
    fn update_and_fetch(
        &mut self,
        k: ArrayHandle,
        v: ArrayHandle,
    ) -> RResult<Tuple2<ArrayHandle, ArrayHandle>, RString> {
        let r = self.lock_promoted().and_then(|mut c| c.update(k.into_array(), v.into_array()));
        ffi(r, |(k, v)| Tuple2(k.into(), v.into()))
    }
    fn state(&self) -> RVec<ArrayHandle> {
        self.lock().state().into_iter().map(ArrayHandle::from).collect()
    }
    fn set_state(&mut self, state: RVec<ArrayHandle>, tokens: i64) -> RResult<(), RString> {
        ffi(self.lock().set_state(state.into_iter().map(ArrayHandle::into_array).collect(), tokens), |()| ())
    }
}

/// When and how a KV cache quantizes itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvQuant {
    /// Keys (None: kept dense).
    pub k: Option<QBits>,
    /// Values (None: kept dense).
    pub v: Option<QBits>,
    /// Quantize once this many tokens are cached (mlx-lm's `quantized_kv_start`).
    pub start: i64,
}

impl KvQuant {
    /// Whether a cache holding `offset` tokens should be quantized now. As in
    /// mlx-lm the check follows a model call, so the first call attends densely.
    pub fn due(&self, offset: i64) -> bool {
        (self.k.is_some() || self.v.is_some()) && offset > 0 && offset >= self.start
    }
}

/// Bit widths MLX quantizes to.
pub const KV_BITS: [i32; 5] = [2, 3, 4, 6, 8];
/// Group sizes MLX quantizes with.
pub const KV_GROUP_SIZES: [i32; 3] = [32, 64, 128];

/// Cache settings chosen by the user.
#[derive(Debug, Clone)]
pub struct CacheOptions {
    /// Bound every KV cache to this many tokens (a rotating window).
    pub max_kv_size: Option<usize>,
    /// Pinned prefix of the windows `max_kv_size` makes (mlx-lm: 4).
    pub keep: usize,
    /// Key bits (None: dense keys).
    pub k_bits: Option<i32>,
    /// Value bits (None: dense values).
    pub v_bits: Option<i32>,
    /// Quantization group size along head_dim.
    pub kv_group_size: i32,
    /// Quantize once this many tokens are cached.
    pub quantized_kv_start: usize,
}

impl Default for CacheOptions {
    fn default() -> Self {
        CacheOptions {
            max_kv_size: None,
            keep: 4,
            k_bits: None,
            v_bits: None,
            kv_group_size: 64,
            quantized_kv_start: 0,
        }
    }
}

impl CacheOptions {
    /// Checks the settings, naming the flag at fault.
    pub fn validate(&self) -> Result<()> {
        for (flag, b) in [("--k-bits", self.k_bits), ("--v-bits", self.v_bits)] {
            if let Some(b) = b {
                if !KV_BITS.contains(&b) {
                    return Err(Error(format!("{flag} (or --kv-bits) must be one of 2, 3, 4, 6, 8; got {b}")));
                }
            }
        }
        if !KV_GROUP_SIZES.contains(&self.kv_group_size) {
            return Err(Error(format!("--kv-group-size must be 32, 64 or 128; got {}", self.kv_group_size)));
        }
        if self.max_kv_size == Some(0) {
            return Err(Error::msg("--max-kv-size must be at least 1"));
        }
        Ok(())
    }

    /// Settings that work but may hurt quality (printed, never changed).
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        if let Some(k) = self.k_bits {
            if k < 8 {
                w.push(format!(
                    "keys quantized to {k} bits: keys are more sensitive to quantization than values; 8-bit keys are the safe choice"
                ));
            }
        }
        if let (Some(k), Some(v)) = (self.k_bits, self.v_bits) {
            if v > k {
                w.push(format!("values get more bits ({v}) than keys ({k}); keys usually need at least as many"));
            }
        }
        w
    }

    /// The quantization every KV cache applies, if any.
    pub fn kv_quant(&self) -> Option<KvQuant> {
        let q = |b: Option<i32>| b.map(|bits| QBits { bits, group_size: self.kv_group_size });
        let kq = KvQuant { k: q(self.k_bits), v: q(self.v_bits), start: self.quantized_kv_start as i64 };
        (kq.k.is_some() || kq.v.is_some()).then_some(kq)
    }
}

/// Makes the caches a plan asks for. `--kv-bits` quantizes full-attention
/// caches (and the windows `--max-kv-size` makes); a model's own sliding
/// windows stay dense.
pub fn make_caches(plan: &[CacheKind], opts: &CacheOptions) -> Result<Vec<SharedCache>> {
    opts.validate()?;
    let quant = opts.kv_quant();
    plan.iter()
        .map(|k| {
            Ok(SharedCache::new(match k {
                CacheKind::Full => match opts.max_kv_size {
                    Some(n) => Box::new(RotatingKvCache::new(n, opts.keep.min(n - 1), quant)?) as Box<dyn CacheImpl>,
                    None => Box::new(KvCache::with_quant(quant)),
                },
                CacheKind::Sliding { window } => {
                    // The model's own window; a smaller --max-kv-size bounds it further.
                    let w = opts.max_kv_size.map_or(*window as usize, |n| n.min(*window as usize)).max(1);
                    // Kept dense under --kv-bits: mlx-lm cannot quantize a
                    // model's sliding windows (RotatingKVCache.to_quantized
                    // raises) and mlx-vlm's mixed KV policies skip them; a
                    // window is small, so quantizing it saves little.
                    Box::new(RotatingKvCache::new(w, 0, None)?)
                }
                CacheKind::Recurrent { arrays } => Box::new(RecurrentCache::new(*arrays as usize)),
            }))
        })
        .collect()
}

/// Rebuilds a cache from what [`CacheImpl::save`] returned (`arrays` keyed
/// by the same field names), dispatching on its `kind`.
pub fn load(meta: &Value, arrays: &HashMap<String, Array>) -> Result<Box<dyn CacheImpl>> {
    let kind: String = field(meta, "kind")?;
    Ok(match kind.as_str() {
        "kv" => Box::new(KvCache::load(meta, arrays)?),
        "quantized" => Box::new(QuantizedKvCache::load(meta, arrays)?),
        "rotating" => Box::new(RotatingKvCache::load(meta, arrays)?),
        "recurrent" => Box::new(RecurrentCache::load(meta, arrays)?),
        k => return Err(Error(format!("unknown cache kind {k:?}"))),
    })
}

/// A field of a saved cache's metadata.
pub(crate) fn field<T: DeserializeOwned>(meta: &Value, key: &str) -> Result<T> {
    let v = meta.get(key).cloned().unwrap_or(Value::Null);
    serde_json::from_value(v).map_err(|e| Error(format!("cache metadata field `{key}`: {e}")))
}

/// Array `name` of a saved cache.
pub(crate) fn tensor(arrays: &HashMap<String, Array>, name: &str) -> Result<Array> {
    arrays.get(name).cloned().ok_or_else(|| Error(format!("missing tensor {name}")))
}

/// Copies of just the caches that could not be trimmed back to where they
/// are now once more tokens are appended (recurrent states, windows that
/// will slide, quantization still to come); the others are trimmed on
/// restore. Unlike [`CacheSnapshot`] it leaves a dense KV cache's buffer
/// unshared, so later writes stay in place. Speculative decoding takes one
/// before each verify forward; a conversation takes one at each turn's end
/// of prefill, to fall back to when the next turn cannot rewind by trimming.
pub struct Checkpoint {
    offsets: Vec<i64>,
    saved: Vec<Option<Box<dyn CacheImpl>>>,
}

impl Checkpoint {
    /// A checkpoint of `caches` good for rewinding up to `n` of the next
    /// `added` tokens; `None` when trimming alone will do.
    pub fn take(caches: &[SharedCache], added: i64, n: i64) -> Option<Checkpoint> {
        let mut offsets = Vec::with_capacity(caches.len());
        let saved: Vec<_> = caches
            .iter()
            .map(|c| {
                let c = c.lock();
                offsets.push(c.offset());
                (!c.can_trim_after(added, n)).then(|| c.snapshot())
            })
            .collect();
        saved.iter().any(Option::is_some).then_some(Checkpoint { offsets, saved })
    }

    /// A checkpoint to come back to after any number of further tokens.
    pub fn take_for_any(caches: &[SharedCache]) -> Option<Checkpoint> {
        const ANY: i64 = 1 << 40;
        Self::take(caches, ANY, ANY)
    }

    /// Tokens the caches held when taken.
    pub fn tokens(&self) -> i64 {
        self.offsets.first().copied().unwrap_or(0)
    }

    /// Brings `caches` (the ones it was taken from) back to that state; the
    /// checkpoint stays usable.
    pub fn restore_into(&self, caches: &[SharedCache]) -> Result<()> {
        if caches.len() != self.saved.len() {
            return Err(Error(format!("checkpoint of {} caches restored into {}", self.saved.len(), caches.len())));
        }
        for ((c, s), &at) in caches.iter().zip(&self.saved).zip(&self.offsets) {
            let mut c = c.lock();
            match s {
                Some(s) => *c = s.snapshot(),
                None => {
                    let n = c.offset() - at;
                    if n < 0 || c.trim(n) != n {
                        return Err(Error(format!(
                            "checkpoint: a cache at {} tokens cannot go back to {at}",
                            c.offset()
                        )));
                    }
                }
            }
        }
        Ok(())
    }
}

impl Clone for Checkpoint {
    fn clone(&self) -> Self {
        let saved = self.saved.iter().map(|s| s.as_ref().map(|s| s.snapshot())).collect();
        Checkpoint { offsets: self.offsets.clone(), saved }
    }
}

impl std::fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let saved = self.saved.iter().filter(|s| s.is_some()).count();
        write!(f, "Checkpoint({} tokens, {saved} of {} caches copied)", self.tokens(), self.saved.len())
    }
}

/// Copies of every layer's cache, cheap to take (arrays are immutable graph
/// nodes, shared rather than copied) and to restore.
pub struct CacheSnapshot {
    caches: Vec<Box<dyn CacheImpl>>,
}

impl CacheSnapshot {
    /// Snapshots `caches`.
    pub fn take(caches: &[SharedCache]) -> Self {
        CacheSnapshot { caches: caches.iter().map(|c| c.lock().snapshot()).collect() }
    }
    /// Puts the snapshot back into `caches` (the same layers it was taken
    /// from); the snapshot stays usable.
    pub fn restore_into(&self, caches: &[SharedCache]) -> Result<()> {
        if caches.len() != self.caches.len() {
            return Err(Error(format!("snapshot of {} caches restored into {}", self.caches.len(), caches.len())));
        }
        for (c, s) in caches.iter().zip(&self.caches) {
            *c.lock() = s.snapshot();
        }
        Ok(())
    }
    /// Tokens the first cache held when taken.
    pub fn offset(&self) -> i64 {
        self.caches.first().map_or(0, |c| c.offset())
    }
}

impl Clone for CacheSnapshot {
    fn clone(&self) -> Self {
        CacheSnapshot { caches: self.caches.iter().map(|c| c.snapshot()).collect() }
    }
}
