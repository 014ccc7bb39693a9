//! Prompt cache files (`famlx cache-prompt`, like mlx-lm's
//! `save_prompt_cache` / `load_prompt_cache`): every layer's cache in one
//! safetensors file, tensors named `cache.{layer}.{field}`, and string
//! metadata saying which model and cache layout it belongs to, how to
//! rebuild each layer, and which token ids the caches hold. A file holds
//! one [`Sequence`]'s caches, for the model given beside it.

use super::{CacheOptions, SharedCache};
use crate::model::{LoadedModel, Sequence};
use anyhow::{anyhow, bail, Context, Result};
use mlx::Array;
use plugin_api::CacheKind;
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;

/// The `format` metadata value of files this version writes.
pub const FORMAT: &str = "famlx-prompt-cache/1";

/// What a prompt cache file must agree on with the model it is loaded into.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Identity {
    family: String,
    model_type: String,
    /// FNV-1a of the checkpoint's config text: a different checkpoint of the
    /// same family (other sizes, quantization) gives different keys/values.
    config_hash: String,
    /// One entry per layer, e.g. `full,full,sliding:512`.
    cache_layout: String,
}

impl Identity {
    fn of(m: &LoadedModel) -> Identity {
        Identity {
            family: m.family.name.to_string(),
            model_type: m.source.model_type.clone(),
            config_hash: format!("{:016x}", fnv1a(m.source.config_text.as_bytes())),
            cache_layout: layout(&m.plan.caches),
        }
    }

    fn fields(&self) -> [(&'static str, &str); 4] {
        [
            ("family", &self.family),
            ("model_type", &self.model_type),
            ("config_hash", &self.config_hash),
            ("cache_layout", &self.cache_layout),
        ]
    }
}

/// 64-bit FNV-1a: stable across builds and platforms, unlike std's hasher.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3))
}

fn layout(plan: &[CacheKind]) -> String {
    plan.iter()
        .map(|k| match k {
            CacheKind::Full => "full".to_string(),
            CacheKind::Sliding { window } => format!("sliding:{window}"),
            CacheKind::Recurrent { arrays } => format!("recurrent:{arrays}"),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The cache flags a file's caches depend on, as the command line spells them.
fn cache_flags(o: &CacheOptions) -> String {
    let bits = |b: Option<i32>| b.map_or("none".to_string(), |b| b.to_string());
    let window = o.max_kv_size.map_or("none".to_string(), |n| n.to_string());
    format!(
        "--k-bits {} --v-bits {} --kv-group-size {} --quantized-kv-start {} --max-kv-size {window}",
        bits(o.k_bits),
        bits(o.v_bits),
        o.kv_group_size,
        o.quantized_kv_start
    )
}

fn check_name(path: &Path) -> Result<()> {
    // MLX appends `.safetensors` to other names, so the file would not be where the user asked.
    if path.extension().and_then(|e| e.to_str()) != Some("safetensors") {
        bail!("{}: a prompt cache file name must end in .safetensors", path.display());
    }
    Ok(())
}

impl Sequence {
    /// Saves every layer's cache to `path` (a `.safetensors` file) with
    /// `ids`, the token ids the caches hold, and the identity of `m`, the
    /// model that filled them.
    pub fn save_prompt_cache(&self, m: &LoadedModel, path: &Path, ids: &[u32]) -> Result<()> {
        check_name(path)?;
        let offset = self.cache_offset();
        if offset != ids.len() as i64 {
            bail!("{}: the caches hold {offset} tokens but {} token ids were given", path.display(), ids.len());
        }
        let mut arrays: Vec<(String, Array)> = Vec::new();
        let mut layers = Vec::with_capacity(self.caches().len());
        for (i, c) in self.caches().iter().enumerate() {
            let (a, meta) = c.lock().save()?;
            arrays.extend(a.into_iter().map(|(n, x)| (format!("cache.{i}.{n}"), x)));
            layers.push(meta);
        }
        let id = Identity::of(m);
        let layers = Value::Array(layers).to_string();
        let ids_text = serde_json::to_string(ids)?;
        let flags = cache_flags(&m.cache_opts);
        let mut meta: Vec<(&str, &str)> =
            vec![("format", FORMAT), ("caches", &layers), ("token_ids", &ids_text), ("cache_flags", &flags)];
        meta.extend(id.fields());
        let refs: Vec<(&str, &Array)> = arrays.iter().map(|(n, a)| (n.as_str(), a)).collect();
        mlx::io::save_safetensors(path, &refs, &meta).map_err(Into::into)
    }

    /// Replaces the caches with those saved in `path`, records the token
    /// ids they hold ([`Sequence::ids`]) and returns them. Refuses, changing nothing, a file saved for another
    /// model than `m` or another cache layout, or with other cache flags (KV bits, group
    /// size, quantization start, `--max-kv-size`) than this run's, as
    /// mlx-lm does: the caches would silently not be what the flags say.
    pub fn load_prompt_cache(&mut self, m: &LoadedModel, path: &Path) -> Result<Vec<u32>> {
        let shown = path.display();
        // MLX's reader would block on a FIFO and trusts the header it reads.
        famlx_formats::safetensors::check_file(path)?;
        let (arrays, meta) = mlx::io::load_safetensors(path)?;
        if meta.get("format").map(String::as_str) != Some(FORMAT) {
            bail!("{shown}: not a famlx prompt cache (no `format: {FORMAT}` metadata)");
        }
        let want = Identity::of(m);
        let differ: Vec<String> = want
            .fields()
            .iter()
            .filter_map(|(k, v)| {
                let got = meta.get(*k).map_or("", String::as_str);
                (got != *v).then(|| format!("{k} {got:?}, this model has {v:?}"))
            })
            .collect();
        if !differ.is_empty() {
            bail!(
                "{shown}: prompt cache was saved for another model or cache layout ({}); re-create it with `famlx cache-prompt`",
                differ.join("; ")
            );
        }
        let mine = cache_flags(&m.cache_opts);
        if let Some(saved) = meta.get("cache_flags").filter(|f| **f != mine) {
            bail!("{shown}: prompt cache was saved with cache flags {saved}, this run has {mine}; pass the same flags or re-create it with `famlx cache-prompt`");
        }
        let (caches, ids) = read_caches(m, &arrays, &meta).with_context(|| format!("{shown}: bad prompt cache"))?;
        self.replace_caches(caches);
        self.set_ids(ids.clone());
        Ok(ids)
    }
}

/// The caches and token ids a file's tensors and metadata hold, checked
/// against the model `m`.
fn read_caches(
    m: &LoadedModel,
    arrays: &HashMap<String, Array>,
    meta: &HashMap<String, String>,
) -> Result<(Vec<SharedCache>, Vec<u32>)> {
    let text = |k: &str| meta.get(k).ok_or_else(|| anyhow!("no `{k}` metadata"));
    let ids: Vec<u32> = serde_json::from_str(text("token_ids")?)?;
    let layers: Vec<Value> = serde_json::from_str(text("caches")?)?;
    if layers.len() != m.plan.caches.len() {
        bail!("{} layer caches for a model of {}", layers.len(), m.plan.caches.len());
    }
    if let Some(&bad) = ids.iter().find(|&&i| i >= m.plan.vocab_size) {
        bail!("token id {bad} is outside the vocabulary");
    }
    let mut caches = Vec::with_capacity(layers.len());
    for (i, lm) in layers.iter().enumerate() {
        let prefix = format!("cache.{i}.");
        let mine: HashMap<String, Array> =
            arrays.iter().filter_map(|(n, a)| Some((n.strip_prefix(&prefix)?.to_string(), a.clone()))).collect();
        let c = super::load(lm, &mine).map_err(|e| anyhow!("layer {i}: {}", e.msg))?;
        if c.offset() != ids.len() as i64 {
            bail!("layer {i} holds {} tokens, the file lists {} token ids", c.offset(), ids.len());
        }
        caches.push(SharedCache::new(c));
    }
    // Read the tensors now, so a truncated file fails here, naming it, not mid-generation.
    let all: Vec<Array> = caches.iter().flat_map(|c| c.lock().arrays()).collect();
    mlx::eval(&all.iter().collect::<Vec<_>>())?;
    Ok((caches, ids))
}
