//! GGUF files of llama.cpp's `hunyuan-dense` architecture: their metadata
//! as hunyuan_v1_dense's config, on [`plugin_api::gguf`]. llama.cpp's
//! converter folds the NTK-alpha scaling into the stored rope base
//! (`rope.freq_base` is already θ·α^(d/(d−2)), scaling type `none`), so the
//! config gets no `rope_scaling` (α = 1); the per-head q/k norms are
//! `attn_{q,k}_norm`.

use mlx::Result;
use plugin_api::gguf::{read_config, DECODER_KEYS};
use plugin_api::FamilyConfig;
use serde_json::{json, Value};

/// llama.cpp's names of the q/k norms → this family's.
pub const NAMES: &[(&str, &str)] =
    &[("attn_q_norm", "self_attn.query_layernorm"), ("attn_k_norm", "self_attn.key_layernorm")];

/// hunyuan_v1_dense's config (GGUF architecture `hunyuan-dense`): llama.cpp
/// always norms q/k and reads no biases.
pub fn hunyuan_dense_config<C: FamilyConfig>(raw: &Value) -> Result<C> {
    read_config(raw, "hunyuan-dense", &[DECODER_KEYS], |c| {
        c.insert("use_qk_norm".into(), json!(true));
        c.insert("attention_bias".into(), json!(false));
        Ok(())
    })
}
