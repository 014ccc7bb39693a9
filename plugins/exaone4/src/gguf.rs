//! GGUF files of `exaone4` (llama.cpp's architecture for EXAONE 4.0): the
//! metadata as the family's config, on [`plugin_api::gguf`]. llama.cpp's
//! standard names serve (`post_attention_norm` and `post_ffw_norm` are the
//! post-branch norms), and its rope is NeoX's, so q/k rows are stored as
//! Hugging Face's. A llama3 rope scaling is not in the metadata: the
//! converter stores it as per-pair period factors, the `rope_freqs`
//! tensor, which llama.cpp reads when the file has it.

use mlx::Result;
use plugin_api::gguf::{get, read_config, sliding_layers, Key, DECODER_KEYS};
use plugin_api::FamilyConfig;
use serde_json::{json, Value};

/// The metadata key prefix.
const ARCH: &str = "exaone4";

/// The sliding layers' window.
const WINDOW: &[Key] = &[("sliding_window", "attention.sliding_window")];

/// exaone4's config: the layer pattern (`attention.sliding_window_pattern`,
/// one flag per layer) as the family's `L` / `G` letters; without it
/// every layer is global and ropes, as without a pattern in config.json.
pub fn exaone4_config<C: FamilyConfig>(raw: &Value) -> Result<C> {
    read_config(raw, ARCH, &[DECODER_KEYS, WINDOW], |c| {
        if get(raw, ARCH, "attention.sliding_window_pattern").is_some() {
            let layers = get(raw, ARCH, "block_count").and_then(Value::as_u64).unwrap_or(0) as usize;
            let sliding = sliding_layers(raw, ARCH, layers, 0)?;
            let pattern: String = sliding.iter().map(|&s| if s { 'L' } else { 'G' }).collect();
            c.insert("sliding_window_pattern".into(), json!(pattern));
        }
        Ok(())
    })
}
