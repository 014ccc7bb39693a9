//! The host's handle to a cache ([`SharedCache`]), shared with the plugin's
//! view of it: the stable [`LayerCache`] trait object a family calls.

use super::attn::{AttnArgs, KvMask};
use super::layer::CacheImpl;
use abi_stable::sabi_trait::TD_Opaque;
use abi_stable::std_types::{RErr, ROk, ROption, RResult, RVec, Tuple2};
use mlx::{Error, Result};
use plugin_api::abi::{ArrayHandle, CacheBox, LayerCache, LayerCache_TO, PluginError};
use plugin_api::{AttnMask, AttnOptions};
use std::sync::{Arc, Mutex, MutexGuard};

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
    pub(super) fn lock_promoted(&self) -> Result<MutexGuard<'_, Box<dyn CacheImpl>>> {
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

fn rerr(e: Error) -> PluginError {
    e.into()
}

fn ffi<T, U>(r: Result<T>, f: impl FnOnce(T) -> U) -> RResult<U, PluginError> {
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
                AttnMask::Causal => KvMask::Causal,
                AttnMask::None => KvMask::None,
                AttnMask::Array(m) => KvMask::Array(m.into_array()),
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
    ) -> RResult<ArrayHandle, PluginError> {
        let r = self
            .lock_promoted()
            .and_then(|mut c| c.attend(q.into_array(), k.into_array(), v.into_array(), &opts.into()));
        ffi(r, ArrayHandle::from)
    }
    fn attend_cached(&self, q: ArrayHandle, opts: AttnOptions) -> RResult<ArrayHandle, PluginError> {
        ffi(self.lock().attend_cached(q.into_array(), &opts.into()), ArrayHandle::from)
    }
    fn update_and_fetch(
        &mut self,
        k: ArrayHandle,
        v: ArrayHandle,
    ) -> RResult<Tuple2<ArrayHandle, ArrayHandle>, PluginError> {
        let r = self.lock_promoted().and_then(|mut c| c.update(k.into_array(), v.into_array()));
        ffi(r, |(k, v)| Tuple2(k.into(), v.into()))
    }
    fn state(&self) -> RVec<ArrayHandle> {
        self.lock().state().into_iter().map(ArrayHandle::from).collect()
    }
    fn set_state(&mut self, state: RVec<ArrayHandle>, tokens: i64) -> RResult<(), PluginError> {
        ffi(self.lock().set_state(state.into_iter().map(ArrayHandle::into_array).collect(), tokens), |()| ())
    }
    fn row_offsets(&self) -> ROption<ArrayHandle> {
        ROption::RNone
    }
    fn row_mask(&self) -> ROption<ArrayHandle> {
        ROption::RNone
    }
}
