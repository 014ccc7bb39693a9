//! The `quantization` / legacy `quantization_config` entries of config.json.

use anyhow::{bail, Result};
use mlx::quant::QuantSpec;
use serde_json::Value;
use std::collections::HashMap;

/// Quantization declared by a checkpoint: a default plus per-module overrides
/// (`None` in an override means that module is stored dense).
#[derive(Debug, Clone, Default)]
pub struct QuantConfig {
    /// Applies to every module that has `.scales` and no override.
    pub default: Option<QuantSpec>,
    /// Per-module settings, keyed by module path (e.g. `model.layers.0.mlp.gate`).
    pub overrides: HashMap<String, Option<QuantSpec>>,
}

fn spec_of(v: &Value, field: &str, fallback: Option<&QuantSpec>) -> Result<QuantSpec> {
    let get = |k: &str| v.get(k).and_then(Value::as_i64);
    let group_size = get("group_size").or(fallback.map(|f| f.group_size as i64));
    let bits = get("bits").or(fallback.map(|f| f.bits as i64));
    let (Some(group_size), Some(bits)) = (group_size, bits) else {
        bail!("field `{field}` needs `group_size` and `bits`");
    };
    if !matches!(bits, 2..=8) {
        bail!("field `{field}.bits`: {bits} is not a supported width (2-8)");
    }
    let mode = v
        .get("mode")
        .and_then(Value::as_str)
        .map(str::to_string)
        .or(fallback.map(|f| f.mode.clone()))
        .unwrap_or_else(|| "affine".into());
    Ok(QuantSpec { group_size: group_size as i32, bits: bits as i32, mode })
}

impl QuantConfig {
    /// Reads `quantization` (mlx-lm) or `quantization_config` (legacy).
    pub fn from_config(config: &Value) -> Result<QuantConfig> {
        let (field, q) = match (config.get("quantization"), config.get("quantization_config")) {
            (Some(q), _) => ("quantization", q),
            (None, Some(q)) if q.get("bits").is_some() => ("quantization_config", q),
            _ => return Ok(QuantConfig::default()),
        };
        let Some(obj) = q.as_object() else {
            bail!("field `{field}` is not an object");
        };
        let default = spec_of(q, field, None)?;
        let mut overrides = HashMap::new();
        for (k, v) in obj {
            match v {
                Value::Object(_) => {
                    overrides.insert(k.clone(), Some(spec_of(v, &format!("{field}.{k}"), Some(&default))?));
                }
                Value::Bool(false) => {
                    overrides.insert(k.clone(), None);
                }
                _ => {}
            }
        }
        Ok(QuantConfig { default: Some(default), overrides })
    }

    /// GGUF checkpoints as MLX unpacks them: affine, groups of 32, bits read
    /// from the tensor shapes.
    pub fn gguf() -> QuantConfig {
        QuantConfig { default: Some(QuantSpec::affine(32, 0)), overrides: HashMap::new() }
    }

    /// The spec of the module at `prefix`, given its packed weight and scales
    /// shapes. A zero `bits` in the declared spec is inferred from them.
    pub fn spec_for(&self, prefix: &str, w_shape: &[i32], scales_shape: &[i32]) -> Option<QuantSpec> {
        let mut spec = match self.overrides.get(prefix) {
            Some(s) => s.clone()?,
            None => self.default.clone()?,
        };
        if spec.bits == 0 {
            let (wc, sc) = (*w_shape.last()? as i64, *scales_shape.last()? as i64);
            if sc == 0 {
                return None;
            }
            spec.bits = (32 * wc / (sc * spec.group_size as i64)) as i32;
        }
        Some(spec)
    }
}
