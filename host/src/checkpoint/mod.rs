//! Reading checkpoints: a Hugging Face / mlx-community folder (config.json,
//! safetensors single or sharded, quantization entries) or a GGUF file.

mod quant;
mod safetensors;

pub use quant::QuantConfig;

use anyhow::{anyhow, bail, Context, Result};
use famlx_text::{MetaValue, Tokenizer};
use mlx::io::GgufValue;
use mlx::Array;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

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
        if path.is_file() {
            if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf")) {
                return Self::open_gguf(path);
            }
            bail!("{}: not a checkpoint folder or .gguf file", path.display());
        }
        Self::open_dir(path)
    }

    fn open_dir(dir: &Path) -> Result<Checkpoint> {
        let cfg_path = dir.join("config.json");
        let text =
            std::fs::read_to_string(&cfg_path).with_context(|| format!("{}: cannot read", cfg_path.display()))?;
        let config: Value =
            serde_json::from_str(&text).map_err(|e| anyhow!("{}: invalid JSON: {e}", cfg_path.display()))?;
        let model_type = config
            .get("model_type")
            .and_then(Value::as_str)
            .ok_or_else(|| anyhow!("{}: missing field `model_type`", cfg_path.display()))?
            .to_string();
        let quant = QuantConfig::from_config(&config).with_context(|| format!("{}", cfg_path.display()))?;
        let tensors = safetensors::load_dir(dir)?;
        let (tokenizer, tokenizer_error) = match Tokenizer::from_dir(dir) {
            Ok(t) => (Some(t), None),
            Err(e) => (None, Some(e.to_string())),
        };
        Ok(Checkpoint { source: dir.to_path_buf(), config, model_type, tensors, quant, tokenizer, tokenizer_error })
    }

    fn open_gguf(path: &Path) -> Result<Checkpoint> {
        let (tensors, meta) = mlx::io::load_gguf(path).map_err(|e| anyhow!("{}", e.0))?;
        let arch = match meta.get("general.architecture") {
            Some(GgufValue::Str(s)) => s.clone(),
            _ => bail!("{}: missing GGUF field `general.architecture`", path.display()),
        };
        let mut config = Map::new();
        let mut text_meta = HashMap::new();
        for (k, v) in &meta {
            let mv = gguf_to_meta(v)?;
            if !k.starts_with("tokenizer.") {
                config.insert(k.clone(), meta_to_json(&mv));
            }
            text_meta.insert(k.clone(), mv);
        }
        if let Some(MetaValue::Strs(t)) = text_meta.get("tokenizer.ggml.tokens") {
            config.insert("tokenizer.ggml.tokens.count".into(), Value::from(t.len()));
        }
        config.insert("model_type".into(), Value::String(arch.clone()));
        config.insert("format".into(), Value::String("gguf".into()));
        let (tokenizer, tokenizer_error) = match Tokenizer::from_gguf(&text_meta) {
            Ok(t) => (Some(t), None),
            Err(e) => (None, Some(format!("{}: {e}", path.display()))),
        };
        // MLX unpacks GGUF's Q4_0/Q4_1/Q8_0 into affine triples with groups of 32.
        let quant = QuantConfig::gguf();
        Ok(Checkpoint {
            source: path.to_path_buf(),
            config: Value::Object(config),
            model_type: arch,
            tensors,
            quant,
            tokenizer,
            tokenizer_error,
        })
    }
}

fn gguf_to_meta(v: &GgufValue) -> Result<MetaValue> {
    Ok(match v {
        GgufValue::Str(s) => MetaValue::Str(s.clone()),
        GgufValue::Strs(s) => MetaValue::Strs(s.clone()),
        GgufValue::None => MetaValue::Strs(vec![]),
        GgufValue::Array(a) => {
            if a.dtype().is_float() {
                MetaValue::Floats(a.to_vec::<f64>().map_err(|e| anyhow!("{}", e.0))?)
            } else if a.dtype() == mlx::Dtype::Bool {
                let v = a.to_vec::<bool>().map_err(|e| anyhow!("{}", e.0))?;
                if v.len() == 1 && a.ndim() == 0 {
                    MetaValue::Bool(v[0])
                } else {
                    MetaValue::Ints(v.into_iter().map(i64::from).collect())
                }
            } else {
                MetaValue::Ints(a.to_vec::<i64>().map_err(|e| anyhow!("{}", e.0))?)
            }
        }
    })
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
