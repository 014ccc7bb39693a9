//! Everything a gemma4 checkpoint's config says, parsed once per plan: the
//! text model's config (or an assistant drafter's), the image and audio
//! settings and the media token ids.

use crate::assistant::{AssistantConfig, MODEL_TYPE};
use crate::audio::AudioConfig;
use crate::config::Config;
use crate::image::ImageConfig;
use crate::media::media_ids;
use mlx::{Error, Result};
use plugin_api::FamilyConfig;
use serde_json::Value;

/// What the checkpoint is.
#[derive(Debug, Clone)]
pub enum Kind {
    /// A text model (`gemma4`, `gemma4_text`, `gemma4_unified`).
    Text(Config),
    /// A drafter (`gemma4_assistant`).
    Assistant(AssistantConfig),
}

/// A gemma4 checkpoint's config. The media settings are kept as they
/// parsed: a `vision_config` that does not describe a usable tower leaves
/// a model without images, and only the calls that need them say why.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(try_from = "Value")]
pub struct CheckpointConfig {
    /// The text model's config, or the assistant's.
    pub kind: Kind,
    /// Image settings (`None`: no `vision_config`).
    pub image: Result<Option<ImageConfig>>,
    /// Audio settings (`None`: no `audio_config`).
    pub audio: Result<Option<AudioConfig>>,
    /// The ids a prompt reads as media (see [`media_ids`]).
    pub media_ids: Result<Vec<u32>>,
}

impl CheckpointConfig {
    /// From config.json (with the processor's settings the host put beside
    /// it); checked by [`FamilyConfig::check`].
    pub fn parse(c: &Value) -> Result<CheckpointConfig> {
        let kind = if c.get("model_type").and_then(Value::as_str) == Some(MODEL_TYPE) {
            Kind::Assistant(AssistantConfig::parse(c)?)
        } else {
            Kind::Text(Config::parse(c)?)
        };
        Ok(CheckpointConfig {
            kind,
            image: ImageConfig::parse(c),
            audio: AudioConfig::parse(c),
            media_ids: media_ids(c),
        })
    }

    /// The text model's config (an assistant's own layers for a drafter).
    pub fn text(&self) -> &Config {
        match &self.kind {
            Kind::Text(c) => c,
            Kind::Assistant(a) => &a.text,
        }
    }

    /// The image settings, or why the `vision_config` does not parse.
    pub fn image(&self) -> Result<Option<&ImageConfig>> {
        self.image.as_ref().map(Option::as_ref).map_err(Clone::clone)
    }

    /// The audio settings, or why the `audio_config` does not parse.
    pub fn audio(&self) -> Result<Option<&AudioConfig>> {
        self.audio.as_ref().map(Option::as_ref).map_err(Clone::clone)
    }

    /// The media ids, or the field that holds no id.
    pub fn media_ids(&self) -> Result<Vec<u32>> {
        self.media_ids.clone()
    }
}

impl TryFrom<Value> for CheckpointConfig {
    type Error = Error;
    fn try_from(v: Value) -> Result<CheckpointConfig> {
        CheckpointConfig::parse(&v)
    }
}

impl FamilyConfig for CheckpointConfig {
    /// A text model's KV-shared layers each need an earlier layer of their
    /// type to read from.
    fn check(&self) -> Result<()> {
        match &self.kind {
            Kind::Text(c) => c.kv_sources().map(|_| ()),
            Kind::Assistant(_) => Ok(()),
        }
    }
}
