//! Gemma 4's audio inputs: the audio settings of a checkpoint (token ids,
//! the processor's token budget, the tower's config) and the audio
//! processor: log-mel features ([`crate::audio_features`]) and
//! `ceil(ms / ms_per_token)` placeholders, capped at `audio_seq_length`, as
//! mlx-vlm 0.7.10's Gemma4Processor counts them.

use crate::audio_features::{log_mel, MEL_BINS, MIN_SAMPLES};
use crate::audio_tower::ConformerConfig;
use mlx::{Array, Error, Result};
use plugin_api::config::{field, field_or};
use plugin_api::media::MediaInput;
use plugin_api::{Placeholders, RawAudio};
use serde_json::Value;

/// Audio settings of a checkpoint with an audio tower.
#[derive(Debug, Clone)]
pub struct AudioConfig {
    /// The soft token each audio row replaces.
    pub audio_token_id: u32,
    /// Begin-of-audio token.
    pub boa_token_id: u32,
    /// End-of-audio token.
    pub eoa_token_id: u32,
    /// Most placeholders per clip (`audio_seq_length`).
    pub max_tokens: u32,
    /// Milliseconds of audio per placeholder.
    pub ms_per_token: u32,
    /// The tower's config.
    pub tower: ConformerConfig,
}

/// The processor's setting `name`: from `processor_config.json`, else
/// config.json, else `default`.
pub fn processor_setting(c: &Value, name: &str, default: u32) -> Result<u32> {
    if let Some(v) = c.get("processor_config").and_then(|p| p.get(name)) {
        return serde_json::from_value(v.clone()).map_err(|e| Error::msg(format!("processor config: {name}: {e}")));
    }
    field_or(c, name, default)
}

impl AudioConfig {
    /// From config.json (with the processor's settings the host put beside
    /// it); `None` for a checkpoint without `audio_config`.
    pub fn parse(c: &Value) -> Result<Option<AudioConfig>> {
        let Some(tower) = ConformerConfig::parse(c)? else { return Ok(None) };
        Ok(Some(AudioConfig {
            audio_token_id: field(c, "audio_token_id")?,
            boa_token_id: field(c, "boa_token_id")?,
            eoa_token_id: eoa_token_id(c)?,
            max_tokens: processor_setting(c, "audio_seq_length", 750)?,
            ms_per_token: ms_per_token(c)?,
            tower,
        }))
    }

    /// How prompts carry audio: each `<|audio|>` the template writes
    /// becomes `<|audio>`, the soft token N times, `<audio|>`.
    pub fn spec(&self) -> Placeholders {
        placeholders(self.audio_token_id, self.boa_token_id, self.eoa_token_id)
    }

    /// The clip's placeholder count.
    pub fn tokens(&self, audio: &RawAudio) -> u32 {
        tokens_for(audio, self.ms_per_token, self.max_tokens)
    }

    /// The tower's inputs for one clip: log-mel `[1, T, 128]` and, in
    /// `extra`, the frame mask `[1, T]` (true inside the clip).
    pub fn process(&self, audio: &RawAudio) -> Result<MediaInput> {
        check_clip(audio)?;
        let mel = log_mel(&audio.samples);
        let t = mel.frames() as i32;
        Ok(MediaInput {
            pixels: Array::from_slice(&mel.features, &[1, t, MEL_BINS as i32])?,
            grid: vec![t as i64],
            tokens: self.tokens(audio),
            extra: vec![Array::from_slice(&mel.mask, &[1, t])?],
        })
    }
}

/// `eoa_token_id` (gemma4_unified's configs may name it `eoa_token_index`).
pub fn eoa_token_id(c: &Value) -> Result<u32> {
    match field_or::<Option<u32>>(c, "eoa_token_id", None)? {
        Some(id) => Ok(id),
        None => {
            field(c, "eoa_token_index").map_err(|_| Error::msg("config: audio needs eoa_token_id (or eoa_token_index)"))
        }
    }
}

/// `audio_ms_per_token` of the processor (default 40), checked positive.
pub fn ms_per_token(c: &Value) -> Result<u32> {
    let ms = processor_setting(c, "audio_ms_per_token", 40)?;
    if ms == 0 {
        return Err(Error::msg("processor config: audio_ms_per_token must be positive"));
    }
    Ok(ms)
}

/// `boa + token × N + eoa` for the marker `token`.
pub fn placeholders(token: u32, boa: u32, eoa: u32) -> Placeholders {
    Placeholders { marker: token, prefix: vec![boa].into(), token_id: token, suffix: vec![eoa].into() }
}

/// `min(ceil(ms / ms_per_token), max)`, the milliseconds computed in
/// double precision as the reference's Python does.
pub fn tokens_for(audio: &RawAudio, ms_per_token: u32, max: u32) -> u32 {
    let ms = audio.samples.len() as f64 / audio.sample_rate as f64 * 1000.0;
    ((ms / ms_per_token as f64).ceil() as u32).min(max)
}

/// A clip the processors take: at 16 kHz, at least
/// [`MIN_SAMPLES`] samples long.
pub fn check_clip(audio: &RawAudio) -> Result<()> {
    if audio.sample_rate != RawAudio::SAMPLE_RATE {
        return Err(Error::msg(format!(
            "the clip is at {} Hz; gemma4 takes {} Hz (the host resamples)",
            audio.sample_rate,
            RawAudio::SAMPLE_RATE
        )));
    }
    if audio.samples.is_empty() {
        return Err(Error::msg("the clip has no samples"));
    }
    if audio.samples.len() < MIN_SAMPLES {
        return Err(Error::msg(format!(
            "the clip is {} samples long at 16 kHz; gemma4's audio features need at least {MIN_SAMPLES} (about {} ms)",
            audio.samples.len(),
            MIN_SAMPLES * 1000 / RawAudio::SAMPLE_RATE as usize
        )));
    }
    Ok(())
}
