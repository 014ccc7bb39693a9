//! What the text model needs to know about media: which tokens carry tower
//! rows, which of them read the pad token's per-layer input, whether image
//! tokens attend within their image both ways, and the towers themselves
//! behind one trait (gemma4's encoders, gemma4_unified's encoder-free
//! embedders).

use mlx::{Array, Error, Result};
use plugin_api::config::field;
use plugin_api::media::MediaInput;
use plugin_api::{MediaSpec, Placeholders};
use serde_json::Value;
use std::fmt::Debug;

/// A tower: one processed item (an image or an audio clip) → its rows,
/// `[tokens, text hidden]`.
pub trait Tower: Send + Debug {
    /// The rows replacing the item's placeholder tokens.
    fn embed(&self, item: &MediaInput) -> Result<Array>;
}

/// The media token ids of a multimodal checkpoint.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MediaTokens {
    /// The soft token image rows replace.
    pub image_token_id: Option<u32>,
    /// The soft token audio rows replace.
    pub audio_token_id: Option<u32>,
    /// Image, video and audio token ids: in the prompt, their per-layer
    /// input is the pad token's (E2B/E4B); see [`media_ids`].
    pub media_ids: Vec<u32>,
    /// Image tokens see their whole image (`use_bidirectional_attention:
    /// "vision"`).
    pub bidirectional_images: bool,
}

impl MediaTokens {
    /// The placeholder ids rows are spliced at.
    pub fn placeholders(&self) -> Vec<u32> {
        self.image_token_id.into_iter().chain(self.audio_token_id).collect()
    }
}

/// The first `n` rows of a tower's output `rows` (`[R, H]`): what the
/// reference's scatter puts into an item's `n` placeholders (row k into the
/// k-th, wrapping round when the tower gives fewer rows than placeholders,
/// as its flat indexing does).
pub fn first_rows(rows: &Array, n: u32) -> Result<Array> {
    let (have, want) = (rows.dim(0), n as i32);
    if have == 0 {
        return Err(Error::msg("the tower gave no rows"));
    }
    if want <= have {
        return rows.slice_axis(0, 0, want);
    }
    let idx: Vec<i32> = (0..want).map(|k| k % have).collect();
    rows.take(&Array::from_slice(&idx, &[want])?, 0)
}

/// A plan's media for the kinds a checkpoint takes (`None`: text only);
/// image placeholders stay in one prefill chunk when image tokens attend
/// both ways.
pub fn media_spec(
    image: Option<Placeholders>,
    audio: Option<Placeholders>,
    images_both_ways: bool,
) -> Option<MediaSpec> {
    if image.is_none() && audio.is_none() {
        return None;
    }
    Some(MediaSpec { keep_images_whole: images_both_ways && image.is_some(), image: image.into(), audio: audio.into() })
}

/// The token ids whose prompt tokens read the pad token's per-layer input
/// (E2B/E4B), as mlx-vlm 0.7.10's multimodal models take them from the
/// config: the image, audio and video token ids, an absent one at that
/// model's default (`gemma4`: 258880, 258881, none; `gemma4_unified`:
/// 258880, 258881, 258884), a `null` one none. None for `gemma4_text`
/// (mlx-lm's and mlx-vlm's text models read every id as itself). An error
/// names a field whose value is not an id.
pub fn media_ids(c: &Value) -> Result<Vec<u32>> {
    let defaults: [Option<u32>; 3] = match c.get("model_type").and_then(Value::as_str) {
        Some("gemma4") => [Some(258880), Some(258881), None],
        Some("gemma4_unified") => [Some(258880), Some(258881), Some(258884)],
        _ => return Ok(Vec::new()),
    };
    ["image_token_id", "audio_token_id", "video_token_id"]
        .into_iter()
        .zip(defaults)
        .filter_map(|(name, default)| match c.get(name) {
            None => default.map(Ok),
            Some(Value::Null) => None,
            Some(_) => Some(field::<u32>(c, name)),
        })
        .collect()
}
