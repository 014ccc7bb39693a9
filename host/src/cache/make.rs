//! Making the caches a plan asks for, and rebuilding a saved one.

use super::kv::KvCache;
use super::layer::{field, CacheImpl};
use super::options::CacheOptions;
use super::quantized::QuantizedKvCache;
use super::recurrent::RecurrentCache;
use super::rotating::RotatingKvCache;
use super::shared::SharedCache;
use mlx::{Array, Error, Result};
use plugin_api::CacheKind;
use serde_json::Value;
use std::collections::HashMap;

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
        k => return Err(Error::msg(format!("unknown cache kind {k:?}"))),
    })
}
