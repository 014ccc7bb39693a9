//! Reading checkpoints: a Hugging Face / mlx-community folder (config.json,
//! safetensors single or sharded, quantization entries) or a GGUF file.

mod gguf_split;
mod on_disk;
mod quant;
mod safetensors;

pub use on_disk::OnDisk;
pub use quant::QuantConfig;

use anyhow::{anyhow, bail, Context, Result};
use famlx_formats::gguf::{self as formats_gguf, Decoded, Gguf, MetaValue, PlainDtype, ScaleType};
use famlx_formats::input::{read_input_text, MAX_JSON};
use famlx_text::Tokenizer;
use mlx::{Array, Dtype};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Files beside the weights a checkpoint folder may use (tokenizer, chat
/// template, generation and processor settings): what a hub download
/// fetches and a conversion copies.
pub const SIDE_FILES: [&str; 12] = [
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "chat_template.jinja",
    "chat_template.json",
    "preprocessor_config.json",
    "processor_config.json",
    "vocab.json",
    "merges.txt",
];

/// A checkpoint as found on disk, before the family's rewriter runs.
pub struct Checkpoint {
    /// The folder or .gguf file.
    pub source: PathBuf,
    /// config.json, or the GGUF metadata (scalars and small arrays) as JSON.
    pub config: Value,
    /// The `model_type` used to pick a family.
    pub model_type: String,
    /// Tensors under their on-disk names (lazily read).
    pub tensors: HashMap<String, Array>,
    /// Where each safetensors tensor lies in its file (empty for GGUF).
    pub on_disk: HashMap<String, OnDisk>,
    /// Quantization as declared by the checkpoint.
    pub quant: QuantConfig,
    /// The tokenizer, when the checkpoint has one.
    pub tokenizer: Option<Tokenizer>,
    /// Why there is no tokenizer, when there is none.
    pub tokenizer_error: Option<String>,
}

impl Checkpoint {
    /// Opens a checkpoint folder or a `.gguf` file.
    pub fn open(path: &Path) -> Result<Checkpoint> {
        if !path.exists() {
            bail!("{}: no such file or directory", path.display());
        }
        if path.is_dir() {
            return Self::open_dir(path);
        }
        if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf")) {
            // Gguf::open refuses what is not a regular file (a FIFO, a device).
            return Self::open_gguf(path);
        }
        bail!("{}: not a checkpoint folder or .gguf file", path.display())
    }

    fn open_dir(dir: &Path) -> Result<Checkpoint> {
        let cfg_path = dir.join("config.json");
        let text = read_input_text(&cfg_path, "a config", MAX_JSON)
            .with_context(|| format!("{}: cannot read", cfg_path.display()))?;
        let mut config: Value =
            serde_json::from_str(&text).map_err(|e| anyhow!("{}: invalid JSON: {e}", cfg_path.display()))?;
        // The image processor's settings ride along for the family's media
        // processor, under the file's own name.
        for name in ["processor_config", "preprocessor_config"] {
            let p = dir.join(format!("{name}.json"));
            if !p.exists() || config.get(name).is_some() {
                continue;
            }
            let text = read_input_text(&p, "a processor config", MAX_JSON)
                .with_context(|| format!("{}: cannot read", p.display()))?;
            let v: Value = serde_json::from_str(&text).map_err(|e| anyhow!("{}: invalid JSON: {e}", p.display()))?;
            if let Some(o) = config.as_object_mut() {
                o.insert(name.to_string(), v);
            }
        }
        let model_type = config
            .get("model_type")
            .and_then(Value::as_str)
            .ok_or_else(|| anyhow!("{}: missing field `model_type`", cfg_path.display()))?
            .to_string();
        let quant = QuantConfig::from_config(&config).with_context(|| format!("{}", cfg_path.display()))?;
        let (tensors, on_disk) = safetensors::load_dir(dir)?;
        let (tokenizer, tokenizer_error) = match Tokenizer::from_dir(dir) {
            Ok(t) => (Some(t), None),
            Err(e) => (None, Some(e.to_string())),
        };
        Ok(Checkpoint {
            source: dir.to_path_buf(),
            config,
            model_type,
            tensors,
            on_disk,
            quant,
            tokenizer,
            tokenizer_error,
        })
    }

    fn open_gguf(path: &Path) -> Result<Checkpoint> {
        // famlx reads GGUF itself: the whole structure is checked before any
        // tensor is touched, and the file is only mapped read-only.
        // A split file's other parts come along; the first holds the metadata.
        let parts = gguf_split::open_parts(path)?;
        let g = &parts[0].1;
        let arch = match g.metadata.get("general.architecture") {
            Some(MetaValue::Str(s)) => s.clone(),
            _ => bail!("{}: missing GGUF field `general.architecture`", path.display()),
        };
        let mut config = Map::new();
        for (k, v) in &g.metadata {
            if !k.starts_with("tokenizer.") {
                config.insert(k.clone(), meta_to_json(v));
            }
        }
        if let Some(MetaValue::Strs(t)) = g.metadata.get("tokenizer.ggml.tokens") {
            config.insert("tokenizer.ggml.tokens.count".into(), Value::from(t.len()));
        }
        config.insert("model_type".into(), Value::String(arch.clone()));
        config.insert("format".into(), Value::String("gguf".into()));
        let tensors = gguf_split::merge(&parts, gguf_tensors).map_err(|e| anyhow!("{}: {e}", path.display()))?;
        // The tokenizer after the tensors, with the file unmapped: building a
        // 262k-entry vocabulary's tokenizer takes ~150 MB for a while, which
        // need not add to the mapped file's pages (Gemma 3 270M's peak).
        let mut parts = parts;
        let metadata = std::mem::take(&mut parts[0].1.metadata);
        drop(parts);
        let (tokenizer, tokenizer_error) = match Tokenizer::from_gguf(&metadata) {
            Ok(t) => (Some(t), None),
            Err(e) => (None, Some(format!("{}: {e}", path.display()))),
        };
        // llama.cpp ties the head to the embedding when the file has no `output.weight`.
        config.insert("tie_word_embeddings".into(), Value::Bool(!tensors.contains_key("output.weight")));
        // Quantized weights are affine triples with groups of 32 (bits per tensor).
        let quant = QuantConfig::gguf();
        Ok(Checkpoint {
            source: path.to_path_buf(),
            config: Value::Object(config),
            model_type: arch,
            tensors,
            on_disk: HashMap::new(),
            quant,
            tokenizer,
            tokenizer_error,
        })
    }
}

/// Every tensor of a parsed GGUF file as MLX arrays: plain types as stored,
/// block-quantized weights as `{name}`, `{prefix}.scales`, `{prefix}.biases`
/// (MLX affine, groups of 32; `famlx_formats::gguf::affine` says which
/// types and how), other block tensors dequantized to float16.
fn gguf_tensors(g: &Gguf) -> Result<HashMap<String, Array>> {
    let mut out = HashMap::with_capacity(g.tensors.len());
    let merr = |name: &str, e: mlx::Error| anyhow!("tensor {name}: {}", e.msg);
    for t in &g.tensors {
        let shape = t.shape();
        match g.decode(t)? {
            Decoded::Plain { dtype, bytes } => {
                let a = Array::from_bytes(&bytes, &shape, plain_dtype(dtype)).map_err(|e| merr(&t.name, e))?;
                out.insert(t.name.clone(), a);
            }
            Decoded::F16(v) => {
                let a = Array::from_bytes(half_bytes(&v), &shape, Dtype::F16).map_err(|e| merr(&t.name, e))?;
                out.insert(t.name.clone(), a);
            }
            Decoded::Affine(q) => {
                let bits = q.form.bits as i32;
                let last = shape.len() - 1;
                let mut ws = shape.clone();
                ws[last] = shape[last] * bits / 32;
                let mut ss = shape.clone();
                ss[last] = shape[last] / formats_gguf::GROUP as i32;
                let prefix = t.name.strip_suffix(".weight").expect("affine tensors are weights");
                let w = Array::from_slice(&q.weight, &ws).map_err(|e| merr(&t.name, e))?;
                let group_params = |v: &[f32]| match q.form.scales {
                    ScaleType::F32 => Array::from_slice(v, &ss),
                    // Every value is a float16 one: the cast is exact.
                    ScaleType::F16 => Array::from_slice(v, &ss).and_then(|a| a.astype(Dtype::F16)),
                };
                let s = group_params(&q.scales).map_err(|e| merr(&t.name, e))?;
                let b = group_params(&q.biases).map_err(|e| merr(&t.name, e))?;
                for (name, a) in [(t.name.clone(), w), (format!("{prefix}.scales"), s), (format!("{prefix}.biases"), b)]
                {
                    if out.insert(name.clone(), a).is_some() {
                        bail!("tensor {name} appears twice (a quantized weight's scales or biases clash with it)");
                    }
                }
            }
        }
        g.release(t);
    }
    Ok(out)
}

/// float16 bit patterns as the little-endian bytes MLX reads.
fn half_bytes(v: &[u16]) -> &[u8] {
    // SAFETY: any u16 slice is a valid byte slice of twice the length; MLX
    // only runs on little-endian machines, so the bytes are in MLX's order.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

fn plain_dtype(d: PlainDtype) -> Dtype {
    match d {
        PlainDtype::F32 => Dtype::F32,
        PlainDtype::F16 => Dtype::F16,
        PlainDtype::BF16 => Dtype::BF16,
        PlainDtype::I8 => Dtype::I8,
        PlainDtype::I16 => Dtype::I16,
        PlainDtype::I32 => Dtype::I32,
        PlainDtype::I64 => Dtype::I64,
    }
}

/// Scalars become JSON scalars; short arrays stay arrays; long ones (vocab
/// tables) are left out of the config.
fn meta_to_json(v: &MetaValue) -> Value {
    match v {
        MetaValue::Str(s) => Value::String(s.clone()),
        MetaValue::Bool(b) => Value::Bool(*b),
        MetaValue::Ints(i) if i.len() == 1 => Value::from(i[0]),
        MetaValue::Floats(f) if f.len() == 1 => Value::from(f[0]),
        MetaValue::Ints(i) if i.len() <= 1024 => Value::from(i.clone()),
        MetaValue::Floats(f) if f.len() <= 1024 => Value::from(f.clone()),
        MetaValue::Strs(s) if s.len() <= 64 => Value::from(s.clone()),
        _ => Value::Null,
    }
}
