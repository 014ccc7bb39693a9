//! Where Qwen3.5's tensors live, and how checkpoint names map there.
//!
//! Weights are held under mlx-lm's names (`language_model.model.*`,
//! `language_model.lm_head.weight`), so per-tensor quantization overrides
//! of converted checkpoints match. Hugging Face checkpoints
//! (`model.language_model.*`, or `model.*` for text-only ones) are renamed;
//! the vision tower (`model.visual.*`) goes under mlx-vlm's
//! `vision_tower.*`; the multi-token-prediction head (`mtp.*`) is kept
//! under `language_model.mtp.*`.

/// Where the text model's tensors live (mlx-lm's naming).
pub const PREFIX: &str = "language_model.model.";

/// Where the MTP head's tensors are held (Hugging Face's `mtp.*`, renamed
/// next to the text model's).
pub const MTP_PREFIX: &str = "language_model.mtp.";

/// The untied output head.
pub const LM_HEAD: &str = "language_model.lm_head";

/// RMSNorm weights that Hugging Face Qwen3.5 checkpoints store zero-centred
/// (the model multiplies by `1 + w`); the gated norm of the delta net is not one.
pub const OFFSET_NORMS: [&str; 8] = [
    ".input_layernorm.weight",
    ".post_attention_layernorm.weight",
    ".q_norm.weight",
    ".k_norm.weight",
    "model.norm.weight",
    "mtp.norm.weight",
    "mtp.pre_fc_norm_embedding.weight",
    "mtp.pre_fc_norm_hidden.weight",
];

/// Maps a checkpoint name to mlx-lm's; `None` drops it. The flag says the
/// tensor came in Hugging Face form.
pub fn canonical_name(name: &str) -> Option<(String, bool)> {
    if name.contains("position_ids") {
        return None;
    }
    for p in ["model.visual.", "model.language_model.visual.", "visual."] {
        if let Some(rest) = name.strip_prefix(p) {
            return Some((format!("vision_tower.{rest}"), true));
        }
    }
    if name.starts_with("vision_tower.") {
        return Some((name.to_string(), false));
    }
    // The multi-token-prediction head: Hugging Face keeps it at the top
    // level (zero-centred norms); a converted checkpoint already holds it
    // under our name (norms shifted).
    if let Some(rest) = name.strip_prefix("mtp.") {
        return Some((format!("{MTP_PREFIX}{rest}"), true));
    }
    if name.starts_with("language_model.") {
        return Some((name.to_string(), false));
    }
    if let Some(rest) = name.strip_prefix("model.language_model.") {
        return Some((format!("{PREFIX}{rest}"), true));
    }
    if name == "lm_head.weight" || name.starts_with("lm_head.") {
        return Some((format!("language_model.{name}"), true));
    }
    if let Some(rest) = name.strip_prefix("model.") {
        return Some((format!("{PREFIX}{rest}"), true));
    }
    None
}
