//! GGUF files of llama.cpp's `apertus` architecture: their metadata as
//! apertus's config, on [`plugin_api::gguf`]. llama.cpp's converter keeps
//! q/k rows as Hugging Face's (no permutation) but moves two things out of
//! the tensors: each layer's xIELU parameters into metadata arrays
//! (`xielu.alpha_p`, `xielu.alpha_n`, `xielu.beta`, `xielu.eps`, raw, as
//! the checkpoint stores them), which `rewrite` turns back into the
//! `act_fn` scalars; and llama3 rope scaling into a `rope_freqs` tensor of
//! per-frequency factors (no `rope.scaling` keys), which the rope divides
//! its frequencies by.

use mlx::{Array, Result};
use plugin_api::config::config_error;
use plugin_api::gguf::{read_config, DECODER_KEYS};
use plugin_api::FamilyConfig;
use serde_json::{json, Value};

/// llama.cpp's names of the block norms → Apertus's.
pub const NAMES: &[(&str, &str)] = &[("attn_norm", "attention_layernorm"), ("ffn_norm", "feedforward_layernorm")];

/// The xIELU metadata keys, in the order of a layer's `gguf_xielu` entry.
pub const XIELU: [(&str, &str); 4] =
    [("xielu.alpha_p", "alpha_p"), ("xielu.alpha_n", "alpha_n"), ("xielu.beta", "beta"), ("xielu.eps", "eps")];

/// apertus's config (GGUF architecture `apertus`): the switches llama.cpp
/// fixes for the architecture (no biases, pre-norm, q/k norms, xIELU), and
/// the per-layer xIELU parameters as `gguf_xielu`.
pub fn apertus_config<C: FamilyConfig>(raw: &Value) -> Result<C> {
    read_config(raw, "apertus", &[DECODER_KEYS], |c| {
        for (field, value) in [("mlp_bias", false), ("attention_bias", false), ("post_norm", false), ("qk_norm", true)]
        {
            c.insert(field.into(), json!(value));
        }
        c.insert("hidden_act".into(), json!("xielu"));
        let layers = c.get("num_hidden_layers").and_then(Value::as_u64).unwrap_or(0) as usize;
        c.insert("gguf_xielu".into(), json!(xielu(raw, layers)?));
        Ok(())
    })
}

/// `[alpha_p, alpha_n, beta, eps]` per layer, from the metadata arrays.
fn xielu(raw: &Value, layers: usize) -> Result<Vec<[f64; 4]>> {
    let mut out = vec![[0.0; 4]; layers];
    for (j, (key, _)) in XIELU.iter().enumerate() {
        let values = raw
            .get(*key)
            .and_then(Value::as_array)
            .ok_or_else(|| config_error(format!("GGUF metadata: missing `{key}`")))?;
        if values.len() != layers {
            let n = values.len();
            return Err(config_error(format!("GGUF metadata `{key}` has {n} entries for {layers} layers")));
        }
        for (i, v) in values.iter().enumerate() {
            out[i][j] =
                v.as_f64().ok_or_else(|| config_error(format!("GGUF metadata `{key}` holds {v}, not a number")))?;
        }
    }
    Ok(out)
}

/// Layer `n`'s xIELU scalars under `{prefix}.act_fn.*`, as the checkpoint
/// names them.
pub fn xielu_tensors(prefix: &str, params: &[f32; 4]) -> Vec<(String, Array)> {
    XIELU.iter().zip(params).map(|((_, name), &v)| (format!("{prefix}.act_fn.{name}"), Array::f32(v))).collect()
}
