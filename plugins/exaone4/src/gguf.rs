//! GGUF files of `exaone4` (llama.cpp's architecture for EXAONE 4.0): the
//! metadata as the family's config, on [`plugin_api::gguf`]. llama.cpp's
//! standard names serve (`post_attention_norm` and `post_ffw_norm` are the
//! post-branch norms), and its rope is NeoX's, so q/k rows are stored as
//! Hugging Face's. A llama3 rope scaling is not in the metadata: the
//! converter stores it as per-pair period factors, the `rope_freqs`
//! tensor, which llama.cpp reads when the file has it.

use mlx::nn::Rope;
use mlx::{Array, Error, Result};
use plugin_api::gguf::{get, read_config, sliding_layers, Key, DECODER_KEYS};
use plugin_api::FamilyConfig;
use serde_json::{json, Value};

/// The metadata key prefix.
const ARCH: &str = "exaone4";

/// The sliding layers' window.
const WINDOW: &[Key] = &[("sliding_window", "attention.sliding_window")];

/// The tensor of llama3-scaled period factors, one per rotated pair.
pub const ROPE_FREQS: &str = "rope_freqs.weight";

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

/// The rope of a file with [`ROPE_FREQS`]: each pair's period `base^(2i/dims)`
/// times its factor (llama.cpp divides the angle by it), which is mlx-lm's
/// llama3 rope for the scaling the converter folded in.
pub fn rope_with_factors(dims: i32, base: f32, factors: &Array) -> Result<Rope> {
    let f = factors.to_vec::<f32>()?;
    if f.len() != (dims / 2) as usize {
        return Err(Error::msg(format!(
            "`{ROPE_FREQS}` has {} factors, the head's {dims} features need {}",
            f.len(),
            dims / 2
        )));
    }
    let periods: Vec<f32> = f.iter().enumerate().map(|(i, k)| base.powf((2 * i) as f32 / dims as f32) * k).collect();
    Ok(Rope::with_freqs(dims, false, Array::from_slice(&periods, &[dims / 2])?))
}
