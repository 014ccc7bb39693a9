//! Host-owned per-layer caches, lent to plugins as [`plugin_api::abi::CacheBox`] trait objects.
//!
//! The host keeps its own handle ([`SharedCache`]) to each cache so it can
//! evaluate, trim, snapshot and restore them between forward calls; the
//! plugin only sees the [`plugin_api::abi::LayerCache`] interface. Kinds: dense ([`KvCache`]),
//! quantized ([`QuantizedKvCache`]), rotating / sliding-window, dense or
//! quantized ([`RotatingKvCache`]), and recurrent state ([`RecurrentCache`]).

mod attn;
mod batch;
mod file;
mod kv;
mod layer;
mod make;
mod options;
mod prefix;
mod quantized;
mod recurrent;
mod rollback;
mod rotating;
mod rows;
mod shared;
mod store;

pub use attn::{causal_mask, window_mask, AttnArgs, KvMask};
pub use batch::BatchCaches;
pub use kv::KvCache;
pub use layer::{CacheImpl, Pack, SavedCache};
pub use make::{load, make_caches};
pub use options::{CacheOptions, KV_BITS, KV_GROUP_SIZES};
pub use prefix::{DraftHit, DraftState, Hit, PrefixCache};
pub use quantized::QuantizedKvCache;
pub use recurrent::RecurrentCache;
pub use rollback::Rollback;
pub use rotating::RotatingKvCache;
pub use rows::RowsCache;
pub use shared::SharedCache;
pub use store::{Kv, KvQuant, QBits, Seq};
