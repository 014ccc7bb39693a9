//! GGUF checkpoints in Hugging Face's terms: what every family that reads
//! llama.cpp's files shares.
//!
//! The host hands a family a GGUF file's metadata as its raw config (keys
//! as in the file, plus `"format": "gguf"`, `"model_type"` set to
//! `general.architecture`, `"tokenizer.ggml.tokens.count"` and
//! `"tie_word_embeddings"`: whether the file lacks `output.weight`, which
//! is how llama.cpp ties the head). A family's `config` turns the
//! `{arch}.`-prefixed keys into its config.json fields ([`config`],
//! [`parse`]; errors name the GGUF's own keys), and its `rewrite` maps
//! llama.cpp's tensor names to Hugging Face's ([`tensor_name`]; stacked
//! experts become mlx-lm's `switch_mlp`). Value conventions that differ
//! (Gemma's norms stored with the +1 folded in, llama's q/k row order)
//! stay with the family.

use crate::config::config_error;
use crate::FamilyConfig;
use mlx::{Error, Result};
use serde_json::{json, Map, Value};

/// A config field and llama.cpp's metadata key for it (after `{arch}.`).
pub type Key = (&'static str, &'static str);

/// The keys every decoder has.
pub const DECODER_KEYS: &[Key] = &[
    ("hidden_size", "embedding_length"),
    ("num_hidden_layers", "block_count"),
    ("intermediate_size", "feed_forward_length"),
    ("num_attention_heads", "attention.head_count"),
    ("num_key_value_heads", "attention.head_count_kv"),
    ("head_dim", "attention.key_length"),
    ("rms_norm_eps", "attention.layer_norm_rms_epsilon"),
    ("rope_theta", "rope.freq_base"),
    ("max_position_embeddings", "context_length"),
    ("vocab_size", "vocab_size"),
];

/// The keys of a mixture of experts.
pub const MOE_KEYS: &[Key] = &[
    ("num_experts", "expert_count"),
    ("num_experts_per_tok", "expert_used_count"),
    ("moe_intermediate_size", "expert_feed_forward_length"),
    ("shared_expert_intermediate_size", "expert_shared_feed_forward_length"),
];

/// The keys llama.cpp requires of every architecture.
pub const REQUIRED: &[&str] = &["block_count", "embedding_length", "context_length"];

/// Whether a raw config is a GGUF file's metadata.
pub fn is_gguf(raw: &Value) -> bool {
    raw.get("format").and_then(Value::as_str) == Some("gguf")
}

/// The value of `{arch}.{key}` in the metadata, when present and not null.
pub fn get<'a>(meta: &'a Value, arch: &str, key: &str) -> Option<&'a Value> {
    meta.get(format!("{arch}.{key}")).filter(|v| !v.is_null())
}

/// The config fields `keys` name, read from the metadata's `{arch}.` keys;
/// the vocabulary from the tokenizer when the metadata has no size, and
/// the head tying the host found. A family adds what it reads otherwise.
pub fn config(meta: &Value, arch: &str, keys: &[&[Key]]) -> Result<Map<String, Value>> {
    let mut c = Map::new();
    for (hf, key) in keys.iter().flat_map(|k| k.iter()) {
        if let Some(v) = get(meta, arch, key) {
            c.insert(hf.to_string(), v.clone());
        }
    }
    if !c.contains_key("vocab_size") {
        if let Some(n) = meta.get("tokenizer.ggml.tokens.count").filter(|v| !v.is_null()) {
            c.insert("vocab_size".into(), n.clone());
        }
    }
    if let Some(t) = meta.get("tie_word_embeddings") {
        c.insert("tie_word_embeddings".into(), t.clone());
    }
    Ok(c)
}

/// Parses and checks a config made by [`config`] (and the family's
/// additions) as `C`; errors name the GGUF metadata keys.
pub fn parse<C: FamilyConfig>(c: Map<String, Value>, arch: &str, keys: &[&[Key]]) -> Result<C> {
    let parsed = crate::config::parse::<C>(&Value::Object(c)).and_then(|cfg| cfg.check().map(|_| cfg));
    parsed.map_err(|e| rename_fields(e, arch, keys))
}

/// A family's config: config.json parsed and checked, or a GGUF file's
/// metadata (architecture `arch`) put in config.json's terms first: the
/// fields `keys` name, `rope_scaling`, and what `fill` adds (the family's
/// own keys, or values llama.cpp fixes for the architecture rather than
/// stores). Errors name the GGUF's keys.
pub fn read_config<C: FamilyConfig>(
    raw: &Value,
    arch: &str,
    keys: &[&[Key]],
    fill: impl FnOnce(&mut Map<String, Value>) -> Result<()>,
) -> Result<C> {
    if !is_gguf(raw) {
        let cfg: C = crate::config::parse(raw)?;
        cfg.check()?;
        return Ok(cfg);
    }
    // What llama.cpp requires of every file, whatever defaults the
    // family's config.json would take.
    for key in REQUIRED {
        require(raw, arch, key)?;
    }
    let mut c = config(raw, arch, keys)?;
    if let Some(s) = rope_scaling(raw, arch) {
        c.insert("rope_scaling".into(), s);
    }
    fill(&mut c)?;
    parse(c, arch, keys)
}

/// An error about a config field, in the GGUF metadata's own key names.
pub fn rename_fields(e: Error, arch: &str, keys: &[&[Key]]) -> Error {
    let mut m =
        e.msg.replace("config: field", "GGUF metadata").replace("config: missing field", "GGUF metadata: missing");
    for (hf, key) in keys.iter().flat_map(|k| k.iter()) {
        m = m.replace(&format!("`{hf}`"), &format!("`{arch}.{key}`"));
    }
    let vocab = format!("`{arch}.vocab_size`");
    m = m.replace(&vocab, &format!("{vocab} (or the tokenizer's token count)"));
    Error { msg: m, ..e }
}

/// Hugging Face's `rope_scaling` for the metadata's `{arch}.rope.scaling.*`
/// keys (`None` when absent or `none`); a type no family reads is kept by
/// name, for the family's check to refuse.
pub fn rope_scaling(meta: &Value, arch: &str) -> Option<Value> {
    let kind = get(meta, arch, "rope.scaling.type")?.as_str()?;
    let factor = get(meta, arch, "rope.scaling.factor").cloned().unwrap_or(Value::Null);
    Some(match kind {
        "none" => return None,
        "linear" => json!({"type": "linear", "factor": factor}),
        "yarn" => {
            let orig = get(meta, arch, "rope.scaling.original_context_length").cloned().unwrap_or(Value::Null);
            json!({"type": "yarn", "factor": factor, "original_max_position_embeddings": orig})
        }
        other => json!({ "type": other }),
    })
}

/// An error naming `{arch}.rope.scaling.type` when the config got a
/// `rope_scaling` (from [`rope_scaling`]) that `family` does not implement.
pub fn refuse_rope_scaling(c: &Map<String, Value>, arch: &str, family: &str) -> Result<()> {
    match c.get("rope_scaling") {
        Some(s) => {
            let kind = s.get("type").and_then(Value::as_str).unwrap_or("?");
            let what = format!("is `{kind}`, which the {family} family does not implement");
            Err(key_error(arch, "rope.scaling.type", &what))
        }
        None => Ok(()),
    }
}

/// Hugging Face's `partial_rotary_factor` from `{arch}.rope.dimension_count`
/// over the head size (`hidden_size / num_attention_heads`); the count must
/// be in 1..=head size. Left out when the width or head count is missing
/// (parsing the config names them).
pub fn partial_rotary(meta: &Value, arch: &str, c: &mut Map<String, Value>) -> Result<()> {
    let dims = get(meta, arch, "rope.dimension_count").and_then(Value::as_f64).unwrap_or(0.0);
    let hidden = c.get("hidden_size").and_then(Value::as_f64).unwrap_or(0.0);
    let heads = c.get("num_attention_heads").and_then(Value::as_f64).unwrap_or(0.0);
    if hidden > 0.0 && heads > 0.0 {
        let head_dim = (hidden / heads).floor();
        if !(dims > 0.0 && dims <= head_dim) {
            return Err(key_error(arch, "rope.dimension_count", &format!("is {dims}, must be in 1..={head_dim}")));
        }
        c.insert("partial_rotary_factor".into(), json!(dims / head_dim));
    }
    Ok(())
}

/// An error naming `{arch}.{key}` when the metadata lacks it (a key
/// llama.cpp requires, where the family's config.json has a default).
pub fn require(meta: &Value, arch: &str, key: &str) -> Result<()> {
    match get(meta, arch, key) {
        Some(_) => Ok(()),
        None => Err(config_error(format!("GGUF metadata: missing `{arch}.{key}`"))),
    }
}

/// A metadata error naming the key (`{arch}.{key}`).
pub fn key_error(arch: &str, key: &str, what: &str) -> Error {
    config_error(format!("GGUF metadata `{arch}.{key}` {what}"))
}

/// llama.cpp's per-block tensor names → Hugging Face's (under
/// `model.layers.{n}.`), as most architectures use them. A family passes
/// its own for the names its architecture uses differently.
const BLOCK_NAMES: &[(&str, &str)] = &[
    ("attn_norm", "input_layernorm"),
    ("attn_q", "self_attn.q_proj"),
    ("attn_k", "self_attn.k_proj"),
    ("attn_v", "self_attn.v_proj"),
    ("attn_output", "self_attn.o_proj"),
    ("attn_q_norm", "self_attn.q_norm"),
    ("attn_k_norm", "self_attn.k_norm"),
    // Llama's pre-FFN norm (Hugging Face calls it post-attention).
    ("ffn_norm", "post_attention_layernorm"),
    // Gemma's and OLMo 2's norms after the attention and after the MLP.
    ("post_attention_norm", "post_attention_layernorm"),
    ("post_ffw_norm", "post_feedforward_layernorm"),
    ("ffn_gate", "mlp.gate_proj"),
    ("ffn_up", "mlp.up_proj"),
    ("ffn_down", "mlp.down_proj"),
    // Mixtures of experts: the router, the stacked experts (mlx-lm's
    // `switch_mlp` layout) and the shared expert.
    ("ffn_gate_inp", "mlp.gate"),
    ("ffn_gate_exps", "mlp.switch_mlp.gate_proj"),
    ("ffn_up_exps", "mlp.switch_mlp.up_proj"),
    ("ffn_down_exps", "mlp.switch_mlp.down_proj"),
    ("ffn_gate_shexp", "mlp.shared_expert.gate_proj"),
    ("ffn_up_shexp", "mlp.shared_expert.up_proj"),
    ("ffn_down_shexp", "mlp.shared_expert.down_proj"),
    ("ffn_gate_inp_shexp", "mlp.shared_expert_gate"),
];

/// A GGUF tensor name → the Hugging Face name (`None`: not a model weight,
/// or a name llama.cpp does not give). `own` maps block parts the family's
/// architecture names differently (e.g. `("ffn_norm",
/// "pre_feedforward_layernorm")` for Gemma), looked up first. The suffix
/// (`weight`, `bias`, or the `scales` / `biases` of a quantized weight)
/// is kept.
pub fn tensor_name(name: &str, own: &[(&str, &str)]) -> Option<String> {
    let (base, suffix) = name.rsplit_once('.')?;
    let mapped = match base {
        "token_embd" => "model.embed_tokens".to_string(),
        "output_norm" => "model.norm".to_string(),
        "output" => "lm_head".to_string(),
        _ => {
            let (n, part) = base.strip_prefix("blk.")?.split_once('.')?;
            n.parse::<u32>().ok()?;
            let hf = own.iter().chain(BLOCK_NAMES).find(|(g, _)| *g == part)?.1;
            format!("model.layers.{n}.{hf}")
        }
    };
    Some(format!("{mapped}.{suffix}"))
}

/// A checkpoint tensor's name for a family's `rewrite`: a GGUF name in
/// Hugging Face's terms ([`tensor_name`] with `own`), any other as it is
/// (so a GGUF name nothing maps stays, and the host reports it unread).
pub fn hf_name(name: &str, own: &[(&str, &str)]) -> String {
    tensor_name(name, own).unwrap_or_else(|| name.to_string())
}

/// A sliding-window layer pattern as llama.cpp reads it: one flag per
/// layer (`{arch}.attention.sliding_window_pattern` as an array), or
/// every `n`-th layer global (the key as a number, or `default_every`
/// when absent). `true`: the layer slides.
pub fn sliding_layers(meta: &Value, arch: &str, layers: usize, default_every: u64) -> Result<Vec<bool>> {
    let key = "attention.sliding_window_pattern";
    let every = match get(meta, arch, key) {
        Some(Value::Array(a)) if a.len() == layers => {
            return Ok(a.iter().map(|v| v.as_i64().is_some_and(|x| x != 0) || v.as_bool() == Some(true)).collect())
        }
        Some(Value::Array(a)) => {
            return Err(key_error(arch, key, &format!("has {} entries for {layers} layers", a.len())))
        }
        Some(v) => v.as_u64().ok_or_else(|| key_error(arch, key, &format!("is {v}, not a layer count")))?,
        None => default_every,
    };
    // llama.cpp: with a pattern of n, the last layer of every n is global.
    Ok((0..layers as u64).map(|i| every > 0 && i % every < every - 1).collect())
}

/// `"sliding_attention"` / `"full_attention"` per layer (Hugging Face's
/// `layer_types`) from [`sliding_layers`]' flags.
pub fn layer_types(sliding: &[bool]) -> Value {
    json!(sliding.iter().map(|&s| if s { "sliding_attention" } else { "full_attention" }).collect::<Vec<_>>())
}

/// Undoes llama.cpp's q/k row permutation: its llama-architecture
/// converter (llama, Mistral, Granite, Mistral 3, ...) stores each head's
/// rows as `[head_dim/2, 2]` pairs for its rope layout; Hugging Face's are
/// `[2, head_dim/2]` halves. The NeoX-rope architectures (Qwen, Gemma, OLMo,
/// StarCoder 2) store them as Hugging Face does and need nothing.
pub fn unpermute(t: &mlx::Array, heads: i32) -> mlx::Result<mlx::Array> {
    let shape = t.shape().to_vec();
    let mut s = vec![heads, shape[0] / heads / 2, 2];
    s.extend_from_slice(&shape[1..]);
    t.reshape(&s)?.swapaxes(1, 2)?.reshape(&shape)
}

/// The tensor in which llama.cpp's converter stores a llama3 rope scaling
/// (one period factor per rotated pair) instead of metadata.
pub const ROPE_FREQS: &str = "rope_freqs.weight";

/// The rope llama.cpp runs for a file with [`ROPE_FREQS`]: each pair's
/// period `base^(2i/dims)` times its factor (llama.cpp divides the angle by
/// it), which is mlx-lm's llama3 rope for the scaling the converter folded
/// in. `None` when the file has no such tensor.
pub fn rope_from_freqs(
    w: &dyn mlx::nn::Weights,
    dims: i32,
    base: f32,
    traditional: bool,
) -> Result<Option<mlx::nn::Rope>> {
    let Some(factors) = w.get(ROPE_FREQS) else { return Ok(None) };
    let f = factors.astype(mlx::Dtype::F32)?.to_vec::<f32>()?;
    if f.len() != (dims / 2) as usize {
        return Err(Error::msg(format!(
            "`{ROPE_FREQS}` has {} factors, the head's {dims} features need {}",
            f.len(),
            dims / 2
        )));
    }
    let periods: Vec<f32> = f.iter().enumerate().map(|(i, k)| base.powf((2 * i) as f32 / dims as f32) * k).collect();
    Ok(Some(mlx::nn::Rope::with_freqs(dims, traditional, mlx::Array::from_slice(&periods, &[dims / 2])?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_rotary_is_the_rotated_share_of_a_head() {
        let meta = json!({"phi2.rope.dimension_count": 32});
        let mut c = Map::new();
        c.insert("hidden_size".into(), json!(256));
        c.insert("num_attention_heads".into(), json!(4));
        partial_rotary(&meta, "phi2", &mut c).unwrap();
        assert_eq!(c["partial_rotary_factor"], json!(0.5));
        let wide = json!({"phi2.rope.dimension_count": 65});
        let e = partial_rotary(&wide, "phi2", &mut c).unwrap_err().to_string();
        assert!(e.contains("`phi2.rope.dimension_count` is 65, must be in 1..=64"), "{e}");
        // No width: nothing derived (parsing names the missing field).
        let mut bare = Map::new();
        partial_rotary(&meta, "phi2", &mut bare).unwrap();
        assert!(!bare.contains_key("partial_rotary_factor"));
    }

    #[test]
    fn rope_scaling_a_family_lacks_is_refused_naming_the_key() {
        let mut c = Map::new();
        refuse_rope_scaling(&c, "stablelm", "stablelm").unwrap();
        c.insert("rope_scaling".into(), json!({"type": "yarn"}));
        let e = refuse_rope_scaling(&c, "stablelm", "stablelm").unwrap_err().to_string();
        assert!(
            e.contains("`stablelm.rope.scaling.type` is `yarn`, which the stablelm family does not implement"),
            "{e}"
        );
    }

    #[test]
    fn names_map_to_hugging_face() {
        let n = |s| tensor_name(s, &[]);
        assert_eq!(n("token_embd.weight").as_deref(), Some("model.embed_tokens.weight"));
        assert_eq!(n("output.scales").as_deref(), Some("lm_head.scales"));
        assert_eq!(n("output_norm.bias").as_deref(), Some("model.norm.bias"));
        assert_eq!(n("blk.3.attn_q.bias").as_deref(), Some("model.layers.3.self_attn.q_proj.bias"));
        assert_eq!(n("blk.0.attn_k_norm.weight").as_deref(), Some("model.layers.0.self_attn.k_norm.weight"));
        assert_eq!(
            n("blk.1.post_ffw_norm.weight").as_deref(),
            Some("model.layers.1.post_feedforward_layernorm.weight")
        );
        assert_eq!(n("blk.1.ffn_gate_inp.weight").as_deref(), Some("model.layers.1.mlp.gate.weight"));
        assert_eq!(n("blk.1.ffn_down_exps.biases").as_deref(), Some("model.layers.1.mlp.switch_mlp.down_proj.biases"));
        assert_eq!(n("rope_freqs.weight"), None);
        assert_eq!(n("blk.0.mystery.weight"), None);
        assert_eq!(n("blk.x.attn_q.weight"), None);
        assert_eq!(n("nodot"), None);
        let gemma = [("ffn_norm", "pre_feedforward_layernorm")];
        assert_eq!(
            tensor_name("blk.2.ffn_norm.weight", &gemma).as_deref(),
            Some("model.layers.2.pre_feedforward_layernorm.weight")
        );
    }

    #[test]
    fn metadata_becomes_config_fields() {
        let meta = json!({
            "qwen2.embedding_length": 64, "qwen2.block_count": 2, "qwen2.expert_count": 4,
            "qwen2.attention.key_length": null, "tokenizer.ggml.tokens.count": 512, "tie_word_embeddings": true,
        });
        let c = config(&meta, "qwen2", &[DECODER_KEYS, MOE_KEYS]).unwrap();
        assert_eq!(c["hidden_size"], 64);
        assert_eq!(c["num_hidden_layers"], 2);
        assert_eq!(c["num_experts"], 4);
        assert_eq!(c["vocab_size"], 512);
        assert_eq!(c["tie_word_embeddings"], true);
        assert!(!c.contains_key("head_dim"));
        assert!(is_gguf(&json!({"format": "gguf"})) && !is_gguf(&json!({})));
        let yarn = json!({"q.rope.scaling.type": "yarn", "q.rope.scaling.factor": 4.0,
            "q.rope.scaling.original_context_length": 32768});
        assert_eq!(
            rope_scaling(&yarn, "q"),
            Some(json!({"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}))
        );
        assert_eq!(rope_scaling(&json!({"q.rope.scaling.type": "none"}), "q"), None);
    }

    #[test]
    fn errors_name_the_metadata_keys() {
        let keys: &[&[Key]] = &[DECODER_KEYS];
        let e =
            rename_fields(Error::msg("config: field `num_key_value_heads` is 0, must be at least 1"), "olmo2", keys);
        assert_eq!(e.msg, "GGUF metadata `olmo2.attention.head_count_kv` is 0, must be at least 1");
        let e = rename_fields(Error::msg("config: missing field `hidden_size`"), "olmo2", keys);
        assert_eq!(e.msg, "GGUF metadata: missing `olmo2.embedding_length`");
        #[derive(serde::Deserialize)]
        struct Tiny {
            #[allow(dead_code)]
            hidden_size: i32,
        }
        impl FamilyConfig for Tiny {}
        let e = parse::<Tiny>(Map::new(), "starcoder2", keys).err().unwrap();
        assert_eq!(e.msg, "GGUF metadata: missing `starcoder2.embedding_length`");
        let meta = json!({"format": "gguf", "x.block_count": 2, "x.embedding_length": 8});
        let e = read_config::<Tiny>(&meta, "x", keys, |_| Ok(())).err().unwrap();
        assert_eq!(e.msg, "GGUF metadata: missing `x.context_length`");
        let meta = json!({"format": "gguf", "x.block_count": 2, "x.embedding_length": 8, "x.context_length": 64});
        assert!(read_config::<Tiny>(&meta, "x", keys, |_| Ok(())).is_ok());
        assert!(read_config::<Tiny>(&json!({"hidden_size": 8}), "x", keys, |_| Ok(())).is_ok());
    }

    #[test]
    fn sliding_patterns_read_as_llama_cpp() {
        let meta = json!({"gemma3.attention.sliding_window_pattern": [1, 0]});
        assert_eq!(sliding_layers(&meta, "gemma3", 2, 6).unwrap(), [true, false]);
        assert_eq!(sliding_layers(&json!({}), "gemma3", 7, 6).unwrap(), [true, true, true, true, true, false, true]);
        let every4 = json!({"x.attention.sliding_window_pattern": 4});
        assert_eq!(sliding_layers(&every4, "x", 4, 6).unwrap(), [true, true, true, false]);
        assert!(sliding_layers(&meta, "gemma3", 3, 6).unwrap_err().msg.contains("has 2 entries for 3 layers"));
        assert_eq!(layer_types(&[true, false]), json!(["sliding_attention", "full_attention"]));
    }
}
