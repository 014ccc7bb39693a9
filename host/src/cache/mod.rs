//! Host-owned per-layer caches, lent to plugins as [`CacheBox`] trait objects.
//!
//! The host keeps its own handle ([`SharedCache`]) to each cache so it can
//! evaluate, trim, snapshot and restore them between forward calls; the
//! plugin only sees the [`LayerCache`] interface.

mod kv;
mod recurrent;

pub use kv::KvCache;
pub use recurrent::RecurrentCache;

use abi_stable::sabi_trait::TD_Opaque;
use abi_stable::std_types::{RErr, ROk, RResult, RString, RVec, Tuple2};
use mlx::fast::{scaled_dot_product_attention, Mask};
use mlx::{Array, Result};
use plugin_api::{ArrayHandle, AttnMask, AttnOptions, CacheBox, CacheKind, LayerCache, LayerCache_TO};
use std::sync::{Arc, Mutex};

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
    /// Drops the last `n` tokens; returns how many were dropped.
    fn trim(&mut self, n: i64) -> i64;
    /// Whether [`CacheImpl::trim`] can undo `n` tokens exactly.
    fn can_trim(&self, n: i64) -> bool;
    /// A cheap copy to restore later.
    fn snapshot(&self) -> Box<dyn CacheImpl>;
    /// Attention mask for `l` new queries given the keys [`CacheImpl::update`] returned.
    fn mask_for(&self, l: i32) -> Result<MaskChoice> {
        Ok(if l > 1 { MaskChoice::Causal } else { MaskChoice::None })
    }
}

/// The mask a cache needs for its last update.
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
    pub fn lock(&self) -> std::sync::MutexGuard<'_, Box<dyn CacheImpl>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
    /// The plugin-facing trait object.
    pub fn boxed(&self) -> CacheBox {
        LayerCache_TO::from_value(self.clone(), TD_Opaque)
    }
}

fn rerr(e: mlx::Error) -> RString {
    e.0.into()
}

fn attend(q: Array, k: &Array, v: &Array, opts: AttnOptions, auto: MaskChoice) -> Result<Array> {
    let sinks = opts.sinks.into_option().map(ArrayHandle::into_array);
    match opts.mask {
        AttnMask::Array(m) => {
            let m = m.into_array();
            scaled_dot_product_attention(&q, k, v, opts.scale, Mask::Array(&m), sinks.as_ref())
        }
        AttnMask::None => scaled_dot_product_attention(&q, k, v, opts.scale, Mask::None, sinks.as_ref()),
        AttnMask::Causal => match auto {
            MaskChoice::None => scaled_dot_product_attention(&q, k, v, opts.scale, Mask::None, sinks.as_ref()),
            MaskChoice::Causal => scaled_dot_product_attention(&q, k, v, opts.scale, Mask::Causal, sinks.as_ref()),
            MaskChoice::Array(m) => scaled_dot_product_attention(&q, k, v, opts.scale, Mask::Array(&m), sinks.as_ref()),
        },
    }
}

impl LayerCache for SharedCache {
    fn offset(&self) -> i64 {
        self.lock().offset()
    }
    fn attend(&mut self, q: ArrayHandle, k: ArrayHandle, v: ArrayHandle, opts: AttnOptions) -> RResult<ArrayHandle, RString> {
        let r = (|| {
            let q = q.into_array();
            let l = q.dim(2);
            let mut c = self.lock();
            let (k, v) = c.update(k.into_array(), v.into_array())?;
            let auto = c.mask_for(l)?;
            drop(c);
            attend(q, &k, &v, opts, auto)
        })();
        match r {
            Ok(a) => ROk(a.into()),
            Err(e) => RErr(rerr(e)),
        }
    }
    fn attend_cached(&self, q: ArrayHandle, opts: AttnOptions) -> RResult<ArrayHandle, RString> {
        let r = (|| {
            let c = self.lock();
            let (k, v) = c.fetch()?.ok_or_else(|| mlx::Error::msg("attend_cached: the cache is empty"))?;
            drop(c);
            // Queries attend to everything already cached.
            attend(q.into_array(), &k, &v, opts, MaskChoice::None)
        })();
        match r {
            Ok(a) => ROk(a.into()),
            Err(e) => RErr(rerr(e)),
        }
    }
    fn update_and_fetch(&mut self, k: ArrayHandle, v: ArrayHandle) -> RResult<Tuple2<ArrayHandle, ArrayHandle>, RString> {
        match self.lock().update(k.into_array(), v.into_array()) {
            Ok((k, v)) => ROk(Tuple2(k.into(), v.into())),
            Err(e) => RErr(rerr(e)),
        }
    }
    fn state(&self) -> RVec<ArrayHandle> {
        self.lock().state().into_iter().map(ArrayHandle::from).collect()
    }
    fn set_state(&mut self, state: RVec<ArrayHandle>, tokens: i64) -> RResult<(), RString> {
        match self.lock().set_state(state.into_iter().map(ArrayHandle::into_array).collect(), tokens) {
            Ok(()) => ROk(()),
            Err(e) => RErr(rerr(e)),
        }
    }
}

/// Cache settings chosen by the user.
#[derive(Debug, Clone, Default)]
pub struct CacheOptions {
    /// Bound every KV cache to this many tokens (a rotating window).
    pub max_kv_size: Option<usize>,
}

/// Makes the caches a plan asks for.
pub fn make_caches(plan: &[CacheKind], _opts: &CacheOptions) -> Result<Vec<SharedCache>> {
    plan.iter()
        .map(|k| {
            Ok(SharedCache::new(match k {
                CacheKind::Full | CacheKind::Sliding { .. } => Box::new(KvCache::new()) as Box<dyn CacheImpl>,
                CacheKind::Recurrent { arrays } => Box::new(RecurrentCache::new(*arrays as usize)),
            }))
        })
        .collect()
}
