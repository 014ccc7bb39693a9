//! What a generation is asked to do and what it reports, and the pieces
//! both decode loops share: the stop rule, the cancel check, buffer release.

use crate::cache::Rollback;
use crate::sample::SamplerParams;
use anyhow::Result;
use mlx::Dtype;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Generation settings.
#[derive(Debug, Clone)]
pub struct GenParams {
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// Sampling.
    pub sampler: SamplerParams,
    /// Prompt tokens per prefill chunk.
    pub prefill_step: usize,
    /// Token ids that end generation (not emitted... but reported).
    pub stop_ids: Vec<u32>,
    /// Take a [`Rollback`] of the caches right after the prompt is
    /// prefilled (returned in [`GenStats::prompt_rollback`]), for a
    /// conversation whose next turn cannot rewind by trimming.
    pub keep_prompt_rollback: bool,
    /// Record the primitives of one steady decode step's graph in
    /// [`GenStats::census`] (a diagnostic: what MLX schedules per token).
    pub census: bool,
    /// Set (e.g. by Ctrl-C) to stop: checked between prefill chunks, which
    /// then fail with [`Interrupted`], and before each token is emitted.
    pub cancel: Option<Arc<AtomicBool>>,
}

/// The error of a generation stopped through [`GenParams::cancel`] before
/// its first token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interrupted;

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("interrupted")
    }
}

impl std::error::Error for Interrupted {}

impl Default for GenParams {
    fn default() -> Self {
        GenParams {
            max_tokens: 256,
            sampler: SamplerParams::default(),
            prefill_step: 2048,
            stop_ids: Vec::new(),
            keep_prompt_rollback: false,
            census: false,
            cancel: None,
        }
    }
}

/// Fails with [`Interrupted`] once `cancel` is set.
pub(crate) fn check_cancel(cancel: Option<&AtomicBool>) -> Result<()> {
    match cancel {
        Some(c) if c.load(Ordering::SeqCst) => Err(Interrupted.into()),
        _ => Ok(()),
    }
}

/// Why generation ended: the one reason `generate`, the engine and the
/// server's replies share (the server writes it as OpenAI's
/// `finish_reason`; the ranks of a split server send it lowercase).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FinishReason {
    /// A stop token was produced (in the engine also: a stop string
    /// matched, the grammar ended).
    Stop,
    /// `max_tokens` reached (in the engine also: the context is full, the
    /// request's deadline passed).
    Length,
    /// The callback asked to stop (in the engine: the request's listener
    /// went away).
    Cancelled,
}

impl FinishReason {
    /// Its name as logs and OpenAI's `finish_reason` write it: `stop`,
    /// `length`, `cancelled`.
    pub fn name(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Cancelled => "cancelled",
        }
    }
}

/// What a generation produced and how fast.
#[derive(Debug, Clone)]
pub struct GenStats {
    /// Prompt length.
    pub prompt_tokens: usize,
    /// Generated ids (including a final stop token, if any).
    pub tokens: Vec<u32>,
    /// Prompt tokens / time to first token.
    pub prompt_tps: f64,
    /// Tokens after the first / time after the first.
    pub generation_tps: f64,
    /// Peak MLX memory during the call.
    pub peak_memory_bytes: usize,
    /// Why it ended.
    pub finish: FinishReason,
    /// Drafting counts, when a drafter ran.
    pub draft: Option<DraftStats>,
    /// Where the plain decode loop's time went (absent for speculative runs).
    pub split: Option<DecodeSplit>,
    /// Primitives of the second decode step's graph, most frequent first
    /// (when [`GenParams::census`] asked for them).
    pub census: Option<Vec<(String, usize)>>,
    /// The caches right after the prompt's prefill (when
    /// [`GenParams::keep_prompt_rollback`] asked for it and some cache
    /// could not otherwise rewind there).
    pub prompt_rollback: Option<Rollback>,
    /// Seconds in the vision tower before the prefill (counted in the time
    /// to first token, hence in `prompt_tps`).
    pub vision_s: f64,
    /// Placeholder tokens the prompt's images took.
    pub image_tokens: usize,
    /// Seconds in the audio tower before the prefill (counted like
    /// `vision_s`).
    pub audio_s: f64,
    /// Placeholder tokens the prompt's audio clips took.
    pub audio_tokens: usize,
}

/// The plain decode loop's time after the first token, in two parts: the
/// host building and queueing each step's graph, and the host blocked
/// reading a token the device has not finished. Wait ≫ build means the
/// device (kernels) bounds decode; build close to the step time means the
/// host does.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DecodeSplit {
    /// Seconds spent in forward + sample + `async_eval`.
    pub build_s: f64,
    /// The part of `build_s` spent inside `async_eval` (MLX scheduling and
    /// encoding the graph); the rest is building it.
    pub launch_s: f64,
    /// Seconds spent in `item` waiting for the device.
    pub wait_s: f64,
}

/// Acceptance counts of a speculative generation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DraftStats {
    /// Tokens the drafter proposed.
    pub proposed: usize,
    /// Of those, tokens the target accepted.
    pub accepted: usize,
    /// Verify rounds.
    pub rounds: usize,
}

/// Empties MLX's buffer cache, as mlx-lm does after each prefill chunk and
/// every [`DecodeRelease::EVERY`] decoded tokens: prefill-sized buffers would
/// otherwise be reused for smaller decode arrays (MLX hands out cached
/// buffers up to twice the size asked for), holding memory the run no
/// longer needs.
pub(crate) fn release_buffers() {
    mlx::memory::clear_cache();
}

/// When a decode loop calls [`release_buffers`]: at the first token, then
/// each time another [`DecodeRelease::EVERY`] tokens have been emitted
/// (the speculative loop emits several per round, so it counts, not
/// divides).
#[derive(Debug, Default)]
pub(crate) struct DecodeRelease {
    next: usize,
}

impl DecodeRelease {
    /// Tokens between two releases (mlx-lm's figure).
    pub(crate) const EVERY: usize = 256;

    /// Called with the number of tokens emitted so far.
    pub(crate) fn tick(&mut self, emitted: usize) {
        if emitted >= self.next {
            release_buffers();
            self.next = emitted + Self::EVERY;
        }
    }
}

impl GenStats {
    /// Stats from the generated tokens and the start, first-token and end
    /// instants (mlx_lm.benchmark's definitions; peak memory read now).
    pub(crate) fn timed(
        prompt_tokens: usize,
        tokens: Vec<u32>,
        finish: FinishReason,
        [t0, t_first, t_end]: [Instant; 3],
        draft: Option<DraftStats>,
    ) -> GenStats {
        let first = t_first.duration_since(t0).as_secs_f64();
        let rest = t_end.duration_since(t_first).as_secs_f64();
        GenStats {
            prompt_tokens,
            prompt_tps: if first > 0.0 { prompt_tokens as f64 / first } else { 0.0 },
            generation_tps: if rest > 0.0 && tokens.len() > 1 { (tokens.len() - 1) as f64 / rest } else { 0.0 },
            peak_memory_bytes: mlx::memory::peak(),
            tokens,
            finish,
            draft,
            split: None,
            census: None,
            prompt_rollback: None,
            vision_s: 0.0,
            image_tokens: 0,
            audio_s: 0.0,
            audio_tokens: 0,
        }
    }
}

impl GenStats {
    /// Counts the towers' work done before the prefill into the time to
    /// first token.
    pub(crate) fn add_media_time(&mut self, t: &MediaTime) {
        let first = if self.prompt_tps > 0.0 { self.prompt_tokens as f64 / self.prompt_tps } else { 0.0 };
        let total = first + t.vision_s + t.audio_s;
        if total > 0.0 {
            self.prompt_tps = self.prompt_tokens as f64 / total;
        }
        self.vision_s = t.vision_s;
        self.image_tokens = t.image_tokens;
        self.audio_s = t.audio_s;
        self.audio_tokens = t.audio_tokens;
    }
}

/// Time in the vision and audio towers for one prompt, and the placeholder
/// tokens of its images and clips.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MediaTime {
    /// Seconds in the vision tower.
    pub vision_s: f64,
    /// Image placeholder tokens.
    pub image_tokens: usize,
    /// Seconds in the audio tower.
    pub audio_s: f64,
    /// Audio placeholder tokens.
    pub audio_tokens: usize,
}

/// Records a generated token and tells whether generation ends with it: a
/// stop token (kept in the output, not passed on) or the callback saying no.
pub(crate) fn emit(
    tokens: &mut Vec<u32>,
    tok: u32,
    p: &GenParams,
    on_token: &mut impl FnMut(u32) -> bool,
) -> Option<FinishReason> {
    tokens.push(tok);
    if p.stop_ids.contains(&tok) {
        Some(FinishReason::Stop)
    } else if p.cancel.as_ref().is_some_and(|c| c.load(Ordering::SeqCst)) || !on_token(tok) {
        Some(FinishReason::Cancelled)
    } else {
        None
    }
}

/// The dtype used for token id inputs.
pub const TOKEN_DTYPE: Dtype = Dtype::I32;
