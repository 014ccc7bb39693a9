//! Reading a family's config: typed parsing that names the field at fault
//! ([`parse`], [`crate::ModelPlan::config_as`]), single fields, the text part
//! of a multimodal config, the rope a config describes (mlx-lm's
//! `initialize_rope`), and checks of the values: a config that cannot
//! describe a real model (no layers, heads that do not divide, a billion
//! layers, an unknown activation) is refused when the plan is made, before
//! anything is allocated or run.

use mlx::nn::{Rope, RopeScaling};
use mlx::{Error, ErrorKind, Result};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Serde defaults for config fields whose default is not the type's
/// `Default`: for each `name / name_or_null: T = value;` it writes `name()`
/// (for `#[serde(default = "name")]`) and `name_or_null` (for
/// `deserialize_with`), which reads a `null` as the default too: checkpoints
/// in the wild write `null` for "not set". One macro so every family states
/// its defaults once, in the struct, the same way.
#[macro_export]
macro_rules! config_defaults {
    ($($default:ident / $or_default:ident: $t:ty = $v:expr;)*) => {$(
        fn $default() -> $t {
            $v
        }
        fn $or_default<'de, D: $crate::serde::Deserializer<'de>>(d: D) -> ::std::result::Result<$t, D::Error> {
            Ok(<Option<$t> as $crate::serde::Deserialize>::deserialize(d)?.unwrap_or_else($default))
        }
    )*};
}

/// A field kept as written, `null` included (with `#[serde(default)]`,
/// `None` means absent): for fields where absent and `null` differ.
pub fn present<'de, D, T>(d: D) -> std::result::Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

/// An error of kind [`ErrorKind::Config`]: a config value at fault.
pub fn config_error(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::Config, msg)
}

/// Parses `c` as `T`, an error naming the field at fault
/// (``config: field `text_config.head_dim`: invalid type ...``).
pub fn parse<T: DeserializeOwned>(c: &Value) -> Result<T> {
    serde_path_to_error::deserialize(c).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." {
            config_error(format!("config: {inner}"))
        } else {
            config_error(format!("config: field `{path}`: {inner}"))
        }
    })
}

/// For `#[serde(default, deserialize_with = "nullable")]`: a field given as
/// `null` reads as absent (its type's default), as [`field_or`] reads it.
pub fn nullable<'de, D, T>(d: D) -> std::result::Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de> + Default,
{
    Ok(<Option<T> as serde::Deserialize>::deserialize(d)?.unwrap_or_default())
}

/// The text part of a config: `text_config` when present (multimodal
/// checkpoints), else the config itself.
pub fn text_config(c: &Value) -> &Value {
    c.get("text_config").filter(|t| t.is_object()).unwrap_or(c)
}

/// Reads a config field, naming it in the error.
pub fn field<T: DeserializeOwned>(cfg: &Value, name: &str) -> Result<T> {
    let v = cfg.get(name).ok_or_else(|| config_error(format!("config: missing field `{name}`")))?;
    serde_json::from_value(v.clone()).map_err(|e| config_error(format!("config: field `{name}`: {e}")))
}

/// Reads an optional config field (`null` counts as absent).
pub fn field_or<T: DeserializeOwned>(cfg: &Value, name: &str, default: T) -> Result<T> {
    match cfg.get(name) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => serde_json::from_value(v.clone()).map_err(|e| config_error(format!("config: field `{name}`: {e}"))),
    }
}

/// `eos_token_id` as an int or a list.
pub fn eos_ids(cfg: &Value) -> Vec<u32> {
    match cfg.get("eos_token_id") {
        Some(Value::Number(n)) => n.as_u64().map(|n| vec![n as u32]).unwrap_or_default(),
        Some(Value::Array(a)) => a.iter().filter_map(|v| v.as_u64().map(|n| n as u32)).collect(),
        _ => Vec::new(),
    }
}

/// The `rope_scaling` entry of a config as a scaling (see [`scaling_of`]).
pub fn rope_scaling(cfg: &Value) -> Result<RopeScaling> {
    named_scaling("rope_scaling", cfg.get("rope_scaling"), field_or(cfg, "max_position_embeddings", 0)?)
}

/// [`scaling_of`], its errors naming the config entry `name` it came from.
pub fn named_scaling(name: &str, entry: Option<&Value>, max_position_embeddings: i32) -> Result<RopeScaling> {
    scaling_of(entry, max_position_embeddings)
        .map_err(|e| Error { msg: e.msg.replace("config: ", &format!("config: {name}: ")), ..e })
}

/// A rope scaling entry (`rope_scaling`, or one of Gemma's
/// `rope_parameters`) as the scaling it describes: `default`, `linear`,
/// `llama3`, `proportional` (partial rotation), `yarn` (and the names
/// mlx-lm reads as it), `dynamic` (NTK), `longrope` / `su` (Phi-3).
/// `max_position_embeddings` sets LongRoPE's magnitude scale and the
/// context past which dynamic NTK grows its base.
pub fn scaling_of(entry: Option<&Value>, max_position_embeddings: i32) -> Result<RopeScaling> {
    let Some(s) = entry.filter(|v| !v.is_null()) else {
        return Ok(RopeScaling::None);
    };
    let kind = s.get("rope_type").or_else(|| s.get("type")).and_then(Value::as_str).unwrap_or("default");
    let f = |k: &str, d: f32| s.get(k).and_then(Value::as_f64).map(|v| v as f32).unwrap_or(d);
    Ok(match kind {
        "default" => RopeScaling::None,
        "linear" => RopeScaling::Linear { factor: field::<f32>(s, "factor")? },
        "llama3" => RopeScaling::Llama3 {
            factor: field::<f32>(s, "factor")?,
            low_freq_factor: f("low_freq_factor", 1.0),
            high_freq_factor: f("high_freq_factor", 4.0),
            original_max_position_embeddings: f("original_max_position_embeddings", 8192.0),
        },
        "proportional" => RopeScaling::Proportional {
            partial_rotary_factor: f("partial_rotary_factor", 1.0),
            factor: f("factor", 1.0),
        },
        // mlx-lm's YarnRoPE, its defaults where the entry leaves a value out.
        "yarn" | "deepseek_yarn" | "telechat3-yarn" => RopeScaling::Yarn {
            factor: field::<f32>(s, "factor")?,
            original_max_position_embeddings: f("original_max_position_embeddings", 4096.0),
            beta_fast: f("beta_fast", 32.0),
            beta_slow: f("beta_slow", 1.0),
            mscale: f("mscale", 1.0),
            mscale_all_dim: f("mscale_all_dim", 0.0),
        },
        // mlx-lm's DynamicNTKScalingRoPE: the base grows with the sequence past the context.
        "dynamic" if max_position_embeddings < 1 => {
            return Err(config_error("config: rope type `dynamic` needs `max_position_embeddings`"))
        }
        "dynamic" => RopeScaling::Dynamic { factor: field::<f32>(s, "factor")?, max_position_embeddings },
        "longrope" | "su" => {
            let original: f32 = field(s, "original_max_position_embeddings")?;
            let long_factor: Vec<f32> = field(s, "long_factor")?;
            // mlx-lm's SuScaledRoPE: the magnitude scale the context stretch implies.
            let stretch = max_position_embeddings as f32 / original;
            let mscale = match s.get("long_mscale").and_then(Value::as_f64) {
                Some(m) => m as f32,
                None if stretch <= 1.0 => 1.0,
                None => (1.0 + stretch.ln() / original.ln()).sqrt(),
            };
            RopeScaling::LongRope { long_factor, mscale }
        }
        other => return Err(config_error(format!("config: rope type `{other}` is not supported"))),
    })
}

/// The rope of `dims` rotated features a config describes (mlx-lm's
/// `initialize_rope`): base `base`, `traditional` (interleaved) pairs, and
/// the scaling entry `scaling`.
pub fn rope(
    dims: i32,
    base: f32,
    traditional: bool,
    scaling: Option<&Value>,
    max_position_embeddings: i32,
) -> Result<Rope> {
    positive_finite("rope_theta", base)?;
    Rope::new(dims, base, traditional, &named_scaling("rope_scaling", scaling, max_position_embeddings)?)
}

/// Bounds far above any released model (largest known: 126 layers, 128
/// heads, head dim 512, width 18432, MLP 53248, vocabulary 262144, 512
/// experts), so a corrupt or hostile config cannot make the host allocate
/// or loop without bound, nor overflow a product of two of them.
pub mod limits {
    /// Decoder layers.
    pub const LAYERS: i32 = 1024;
    /// Attention heads (and key/value heads).
    pub const HEADS: i32 = 1024;
    /// Features per head.
    pub const HEAD_DIM: i32 = 4096;
    /// Width of the residual stream.
    pub const HIDDEN: i32 = 1 << 17;
    /// Width of an MLP.
    pub const INTERMEDIATE: i32 = 1 << 19;
    /// Vocabulary.
    pub const VOCAB: i32 = 1 << 22;
    /// Routed experts.
    pub const EXPERTS: i32 = 1 << 14;
}

/// `value` must lie in `1..=max`.
pub fn in_range(field: &str, value: i32, max: i32) -> Result<()> {
    if value < 1 {
        return Err(config_error(format!("config: field `{field}` is {value}, must be at least 1")));
    }
    if value > max {
        return Err(config_error(format!("config: field `{field}` is {value}, more than famlx supports ({max})")));
    }
    Ok(())
}

/// `value` must lie in `0..=max`.
pub fn at_most(field: &str, value: i32, max: i32) -> Result<()> {
    if !(0..=max).contains(&value) {
        return Err(config_error(format!("config: field `{field}` is {value}, must be in 0..={max}")));
    }
    Ok(())
}

/// `part` must divide `whole` (e.g. key/value heads into query heads).
pub fn divides(part_field: &str, part: i32, whole_field: &str, whole: i32) -> Result<()> {
    if part < 1 || whole % part != 0 {
        return Err(config_error(format!(
            "config: field `{part_field}` ({part}) must divide `{whole_field}` ({whole})"
        )));
    }
    Ok(())
}

/// `value` must be finite and greater than zero (rope bases, norm epsilons).
pub fn positive_finite(field: &str, value: f32) -> Result<()> {
    if !(value.is_finite() && value > 0.0) {
        return Err(config_error(format!("config: field `{field}` is {value}, must be a positive number")));
    }
    Ok(())
}

/// `value`, when the config has it, must be one of `allowed`.
pub fn one_of(field: &str, value: Option<&str>, allowed: &[&str]) -> Result<()> {
    match value {
        Some(v) if !allowed.contains(&v) => Err(config_error(format!(
            "config: field `{field}` is {v:?}, which this family does not implement (supported: {})",
            allowed.join(", ")
        ))),
        _ => Ok(()),
    }
}

/// The usual shape fields of a decoder, checked together.
#[derive(Debug, Clone, Copy)]
pub struct DecoderFields {
    /// `hidden_size`
    pub hidden: i32,
    /// `num_hidden_layers`
    pub layers: i32,
    /// `intermediate_size`
    pub intermediate: i32,
    /// `num_attention_heads`
    pub heads: i32,
    /// `num_key_value_heads`
    pub kv_heads: i32,
    /// `head_dim`
    pub head_dim: i32,
    /// `vocab_size`
    pub vocab: i32,
}

impl DecoderFields {
    /// Every field within its limits, and the key/value heads dividing the
    /// query heads (grouped-query attention).
    pub fn check(&self) -> Result<()> {
        in_range("hidden_size", self.hidden, limits::HIDDEN)?;
        in_range("num_hidden_layers", self.layers, limits::LAYERS)?;
        in_range("intermediate_size", self.intermediate, limits::INTERMEDIATE)?;
        in_range("num_attention_heads", self.heads, limits::HEADS)?;
        in_range("num_key_value_heads", self.kv_heads, limits::HEADS)?;
        in_range("head_dim", self.head_dim, limits::HEAD_DIM)?;
        in_range("vocab_size", self.vocab, limits::VOCAB)?;
        divides("num_key_value_heads", self.kv_heads, "num_attention_heads", self.heads)
    }
}

/// The head width a config implies when it has no `head_dim`:
/// `hidden_size / num_attention_heads`, which must divide evenly.
pub fn implied_head_dim(hidden: i32, heads: i32) -> Result<i32> {
    in_range("num_attention_heads", heads, limits::HEADS)?;
    if hidden % heads != 0 {
        return Err(config_error(format!(
            "config: field `num_attention_heads` ({heads}) must divide `hidden_size` ({hidden}) when there is no `head_dim`"
        )));
    }
    Ok(hidden / heads)
}

/// The context a model runs to: `max_position_embeddings`, extended by a
/// rope scaling that stretches positions (`factor` times the original
/// length, unless the config already gives a longer one, as Llama 3's and
/// many YaRN ones do). 0: unknown.
pub fn context_length(max_position_embeddings: i32, scaling: &RopeScaling) -> u32 {
    let mpe = max_position_embeddings.max(0) as f64;
    let scaled = match scaling {
        RopeScaling::None | RopeScaling::Proportional { .. } | RopeScaling::LongRope { .. } => mpe,
        RopeScaling::Linear { factor } | RopeScaling::Dynamic { factor, .. } => mpe * *factor as f64,
        RopeScaling::Llama3 { factor, original_max_position_embeddings, .. }
        | RopeScaling::Yarn { factor, original_max_position_embeddings, .. } => {
            mpe.max(*original_max_position_embeddings as f64 * *factor as f64)
        }
    };
    scaled.min(u32::MAX as f64) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_field_and_value() {
        assert!(in_range("num_hidden_layers", -3, 8).unwrap_err().msg.contains("`num_hidden_layers` is -3"));
        assert!(in_range("num_hidden_layers", 1_000_000_000, 1024).unwrap_err().msg.contains("1000000000"));
        let e = divides("num_key_value_heads", 3, "num_attention_heads", 8).unwrap_err().msg;
        assert!(e.contains("(3)") && e.contains("(8)"), "{e}");
        assert!(divides("num_key_value_heads", 0, "num_attention_heads", 8).is_err());
        assert!(positive_finite("rope_theta", 0.0).is_err());
        assert!(positive_finite("rope_theta", f32::NAN).is_err());
        assert!(one_of("hidden_act", Some("foo"), &["silu"]).unwrap_err().msg.contains("\"foo\""));
        assert!(one_of("hidden_act", None, &["silu"]).is_ok());
        assert!(implied_head_dim(64, 3).unwrap_err().msg.contains("must divide `hidden_size`"));
        assert_eq!(implied_head_dim(64, 4).unwrap(), 16);
    }

    #[test]
    fn config_errors_are_of_kind_config() {
        assert_eq!(in_range("num_hidden_layers", 0, 8).unwrap_err().kind, ErrorKind::Config);
        let e = parse::<std::collections::HashMap<String, u32>>(&serde_json::json!({"a": "x"})).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Config, "{e}");
        assert_eq!(field::<u32>(&serde_json::json!({}), "a").unwrap_err().kind, ErrorKind::Config);
    }
}
