//! GGUF files of llama.cpp's `seed_oss` architecture: their metadata as
//! seed_oss's config, on [`plugin_api::gguf`]. llama.cpp stores q/k rows
//! as Hugging Face's (NeoX rope) and names the pre-MLP norm
//! `post_attention_norm`, which the standard names already map.

use mlx::Result;
use plugin_api::gguf::{read_config, DECODER_KEYS};
use plugin_api::FamilyConfig;
use serde_json::{json, Value};

/// seed_oss's config (GGUF architecture `seed_oss`). The metadata does not
/// say which projections carry biases: llama.cpp's converter writes the
/// released checkpoint's (q/k/v biased, output projection and MLP not).
pub fn seed_oss_config<C: FamilyConfig>(raw: &Value) -> Result<C> {
    read_config(raw, "seed_oss", &[DECODER_KEYS], |c| {
        c.insert("attention_bias".into(), json!(true));
        c.insert("attention_out_bias".into(), json!(false));
        c.insert("mlp_bias".into(), json!(false));
        Ok(())
    })
}
