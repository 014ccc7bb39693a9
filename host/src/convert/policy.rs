//! What the converter does to each tensor: the run's quantization settings
//! (mode defaults and the combinations MLX supports, the mixed recipes) and,
//! per rewritten tensor, the family's [`QuantClass`] turned into one
//! decision, with the rules `mlx_lm.convert` follows so both write the same
//! bytes.

use anyhow::{bail, Result};
use mlx::quant::QuantSpec;
use mlx::Dtype;
use plugin_api::QuantClass;
use serde_json::{json, Value};
use std::collections::BTreeSet;

/// The quantization modes `--q-mode` takes.
pub const MODES: [&str; 4] = ["affine", "mxfp4", "nvfp4", "mxfp8"];

/// The mixed-precision recipes `--quant-predicate` takes.
pub const RECIPES: [&str; 4] = ["mixed_2_6", "mixed_3_4", "mixed_3_6", "mixed_4_6"];

/// The run's quantization: the default spec and an optional mixed recipe.
#[derive(Debug, Clone)]
pub struct QuantRun {
    /// Bits, group size and mode of a body tensor.
    pub spec: QuantSpec,
    /// A mixed-precision recipe (affine only).
    pub recipe: Option<Recipe>,
}

impl QuantRun {
    /// The run's settings from the flags: `bits` and `group_size` default
    /// per mode as MLX does (affine 4/64, mxfp4 4/32, nvfp4 4/16, mxfp8
    /// 8/32); combinations MLX cannot pack are refused.
    pub fn new(mode: &str, bits: Option<i32>, group_size: Option<i32>, recipe: Option<&str>) -> Result<QuantRun> {
        let (g0, b0) = match mode {
            "affine" => (64, 4),
            "mxfp4" => (32, 4),
            "nvfp4" => (16, 4),
            "mxfp8" => (32, 8),
            m => bail!("--q-mode: unknown mode {m:?} (one of {})", MODES.join(", ")),
        };
        let spec = QuantSpec { group_size: group_size.unwrap_or(g0), bits: bits.unwrap_or(b0), mode: mode.to_string() };
        check_spec(&spec)?;
        let recipe = match recipe {
            None => None,
            Some(_) if mode != "affine" => bail!("--quant-predicate: mixed recipes only support --q-mode affine"),
            Some(r) => Some(Recipe::parse(r, spec.group_size)?),
        };
        Ok(QuantRun { spec, recipe })
    }
}

/// Refuses what MLX's quantize does not support.
pub fn check_spec(s: &QuantSpec) -> Result<()> {
    let ok = match s.mode.as_str() {
        "affine" => {
            if !matches!(s.bits, 2 | 3 | 4 | 5 | 6 | 8) {
                bail!("--q-bits: affine quantization takes 2, 3, 4, 5, 6 or 8 bits, not {}", s.bits);
            }
            matches!(s.group_size, 32 | 64 | 128)
        }
        "mxfp4" | "mxfp8" => s.group_size == 32 && s.bits == if s.mode == "mxfp4" { 4 } else { 8 },
        "nvfp4" => s.group_size == 16 && s.bits == 4,
        m => bail!("--q-mode: unknown mode {m:?} (one of {})", MODES.join(", ")),
    };
    if !ok {
        let want = match s.mode.as_str() {
            "affine" => "group size 32, 64 or 128",
            "mxfp4" => "4 bits, group size 32",
            "nvfp4" => "4 bits, group size 16",
            _ => "8 bits, group size 32",
        };
        bail!("--q-bits {} --q-group-size {}: {} quantization takes {want}", s.bits, s.group_size, s.mode);
    }
    Ok(())
}

/// A mixed-precision recipe in the style of llama.cpp's Q4_K_M, as
/// `mlx_lm.convert --quant-predicate` defines them: more bits for the value
/// and down projections of the first and last eighth of the layers and of
/// every third layer between, and for the output head.
#[derive(Debug, Clone)]
pub struct Recipe {
    low: i32,
    high: i32,
    group_size: i32,
    /// Where the layer index sits in a dotted module path, and the layer count.
    layers: Option<(usize, usize)>,
}

impl Recipe {
    fn parse(name: &str, group_size: i32) -> Result<Recipe> {
        let (low, high) = match name {
            "mixed_2_6" => (2, 6),
            "mixed_3_4" => (3, 4),
            "mixed_3_6" => (3, 6),
            "mixed_4_6" => (4, 6),
            r => bail!("--quant-predicate: unknown recipe {r:?} (one of {})", RECIPES.join(", ")),
        };
        Ok(Recipe { low, high, group_size, layers: None })
    }

    /// Learns the layer layout from the model's module paths: the index is
    /// the first numeric part of the first `down_proj` path, the count the
    /// distinct indices under that path's stem.
    pub fn learn_layers<'a>(&mut self, modules: impl Iterator<Item = &'a str> + Clone) -> Result<()> {
        let Some(first) = modules.clone().filter(|m| m.contains("down_proj")).min() else {
            bail!("--quant-predicate: the model has no down_proj layers for a mixed recipe");
        };
        let parts: Vec<&str> = first.split('.').collect();
        let Some(at) = parts.iter().position(|p| p.parse::<usize>().is_ok()) else {
            bail!("--quant-predicate: no layer index in {first}");
        };
        let stem = parts[..at].join(".");
        let indices: BTreeSet<&str> = modules
            .filter_map(|m| {
                let p: Vec<&str> = m.split('.').collect();
                (p.len() > at && p[..at].join(".") == stem).then(|| p[at])
            })
            .filter(|s| s.parse::<usize>().is_ok())
            .collect();
        self.layers = Some((at, indices.len()));
        Ok(())
    }

    /// The spec of the module at `path`.
    fn spec(&self, path: &str) -> QuantSpec {
        let (at, n) = self.layers.unwrap_or((usize::MAX, 1));
        let index = path.split('.').nth(at).and_then(|s| s.parse::<usize>().ok()).unwrap_or(0);
        let more = index < n / 8 || index >= 7 * n / 8 || (index as i64 - (n / 8) as i64).rem_euclid(3) == 2;
        let high = (["v_proj", "v_a_proj", "v_b_proj", "down_proj"].iter().any(|s| path.contains(s)) && more)
            || path.contains("lm_head");
        QuantSpec::affine(self.group_size, if high { self.high } else { self.low })
    }
}

/// What happens to one rewritten tensor.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Written as it is.
    Keep,
    /// Cast to this float type.
    Cast(Dtype),
    /// Cast (when a type is given) and quantized; `entry` is what the
    /// config's `quantization` block records for the module, when it is
    /// not the default.
    Quantize {
        /// Cast to this type first.
        cast: Option<Dtype>,
        /// How.
        spec: QuantSpec,
        /// The module's own entry in the `quantization` block.
        entry: Option<Value>,
    },
}

/// Decides one tensor: `class` from the family, the tensor's `shape` and
/// `dtype`, the run's target `dtype` and quantization. As `mlx_lm.convert`:
/// every float tensor is cast (unless the family keeps it); a matrix whose
/// last dimension the run's group size does not divide stays dense.
pub fn decide(
    name: &str,
    class: &QuantClass,
    shape: &[i32],
    dtype: Dtype,
    target: Option<Dtype>,
    quant: Option<&QuantRun>,
) -> Action {
    if *class == QuantClass::Keep {
        return Action::Keep;
    }
    let cast = target.filter(|&t| dtype.is_float() && t != dtype);
    let module = name.strip_suffix(".weight");
    let quantizable = matches!(class, QuantClass::Body | QuantClass::Pinned(_)) && dtype.is_float() && shape.len() >= 2;
    match (quant, module) {
        (Some(q), Some(module)) if quantizable && shape[shape.len() - 1] % q.spec.group_size == 0 => {
            // A recipe replaces the family's own pins, as in mlx-lm.
            let (spec, entry) = match (class, &q.recipe) {
                (_, Some(r)) => {
                    let s = r.spec(module);
                    let e = json!({"group_size": s.group_size, "bits": s.bits, "mode": s.mode});
                    (s, Some(e))
                }
                (QuantClass::Pinned(p), None) => {
                    let p = mlx::quant::QuantSpec::from(p);
                    // As the families' own predicates in mlx-lm: no mode
                    // key for affine.
                    let mut e = json!({"group_size": p.group_size, "bits": p.bits});
                    if p.mode != "affine" {
                        e["mode"] = json!(p.mode);
                    }
                    (p, Some(e))
                }
                _ => (q.spec.clone(), None),
            };
            Action::Quantize { cast, spec, entry }
        }
        _ => match cast {
            Some(t) => Action::Cast(t),
            None => Action::Keep,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_defaults_and_refusals() {
        let q = QuantRun::new("nvfp4", None, None, None).unwrap();
        assert_eq!((q.spec.bits, q.spec.group_size), (4, 16));
        let q = QuantRun::new("mxfp8", None, None, None).unwrap();
        assert_eq!((q.spec.bits, q.spec.group_size), (8, 32));
        assert!(QuantRun::new("affine", Some(7), None, None).is_err());
        assert!(QuantRun::new("affine", Some(4), Some(48), None).is_err());
        assert!(QuantRun::new("mxfp4", Some(4), Some(64), None).is_err());
        assert!(QuantRun::new("mxfp4", None, None, Some("mixed_3_6")).is_err());
        assert!(QuantRun::new("affine", None, None, Some("mixed_9_9")).is_err());
    }

    #[test]
    fn recipe_gives_more_bits_where_mlx_lm_does() {
        let mut q = QuantRun::new("affine", None, Some(64), Some("mixed_3_6")).unwrap();
        let names: Vec<String> = (0..16).map(|i| format!("model.layers.{i}.mlp.down_proj")).collect();
        let r = q.recipe.as_mut().unwrap();
        r.learn_layers(names.iter().map(String::as_str)).unwrap();
        let bits = |p: &str| r.spec(p).bits;
        // 16 layers: 0-1 and 14-15 are the ends; between, index-2 ≡ 2 (mod 3).
        assert_eq!(bits("model.layers.0.mlp.down_proj"), 6);
        assert_eq!(bits("model.layers.2.mlp.down_proj"), 3);
        assert_eq!(bits("model.layers.4.mlp.down_proj"), 6);
        assert_eq!(bits("model.layers.4.self_attn.q_proj"), 3);
        assert_eq!(bits("model.layers.15.self_attn.v_proj"), 6);
        assert_eq!(bits("lm_head"), 6);
        // Layer 0 by the rule, but neither a value nor a down projection.
        assert_eq!(bits("model.embed_tokens"), 3);
    }

    #[test]
    fn decisions() {
        let q = QuantRun::new("affine", Some(4), Some(64), None).unwrap();
        let body = QuantClass::Body;
        let d = decide("a.weight", &body, &[8, 128], Dtype::F32, Some(Dtype::BF16), Some(&q));
        assert!(matches!(d, Action::Quantize { cast: Some(Dtype::BF16), entry: None, .. }));
        // Last dimension not a multiple of the group size: dense.
        assert_eq!(decide("a.weight", &body, &[8, 96], Dtype::BF16, None, Some(&q)), Action::Keep);
        assert_eq!(
            decide("n.weight", &QuantClass::Skip, &[8], Dtype::F32, Some(Dtype::F16), Some(&q)),
            Action::Cast(Dtype::F16)
        );
        assert_eq!(decide("A_log", &QuantClass::Keep, &[8], Dtype::F32, Some(Dtype::F16), Some(&q)), Action::Keep);
        let pinned = QuantClass::Pinned(plugin_api::QuantSpec { group_size: 64, bits: 8, mode: "affine".into() });
        let Action::Quantize { entry: Some(e), spec, .. } =
            decide("r.weight", &pinned, &[4, 64], Dtype::BF16, None, Some(&q))
        else {
            panic!("pinned tensors are quantized")
        };
        assert_eq!((spec.bits, e), (8, json!({"group_size": 64, "bits": 8})));
    }
}
