//! A session: a loaded model with its conversation's [`Sequence`]. The
//! caches stay warm across turns (each turn prefills only what follows the longest common
//! prefix with what is cached), the drafter for speculative decoding, and
//! the rollback point a turn falls back to when a cache cannot rewind.

use crate::cache::Rollback;
use crate::decode::{generate, generate_speculative, DraftSource, Drafter, GenParams, GenStats, MediaTime, SpecParams};
use crate::model::{LoadedModel, MediaSpan, MediaState, Sequence};
use crate::plugins::FamilyEntry;
use crate::prompt::{MediaKind, Prompt};
use anyhow::Result;
use mlx::Array;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// A model and what decoding keeps between calls.
pub struct Session {
    /// The model (weights, plugin model, tokenizer).
    pub model: LoadedModel,
    /// The conversation's sequence: its caches, the ids they hold, media
    /// and drafter caches.
    pub seq: Sequence,
    /// The drafter speculative decoding uses, when one is loaded.
    pub drafter: Option<Drafter>,
    /// Speculative decoding settings.
    pub spec: SpecParams,
    /// The caches at the end of the last turn's prefill (its whole prompt,
    /// the sequence's first `tokens` ids), kept when some cache cannot
    /// rewind by trimming.
    pub rollback: Option<Rollback>,
    /// The images and clips in the sequence's ids: where each placeholder run
    /// starts, and the item's hash.
    pub cached_media: Vec<(usize, u64)>,
    /// The towers' rows of the conversation's images and clips, by hash
    /// (an item already seen is not embedded again).
    media_rows: HashMap<u64, Array>,
}

impl Session {
    /// A session over `model` with empty memory and no drafter.
    pub fn new(model: LoadedModel) -> Result<Session> {
        Ok(Session {
            seq: model.sequence()?,
            model,
            drafter: None,
            spec: SpecParams::default(),
            rollback: None,
            cached_media: Vec::new(),
            media_rows: HashMap::new(),
        })
    }

    /// Makes the caches hold a prefix of `ids` and returns where prefill must
    /// start. Rewinds by trimming when every cache can; otherwise (a wrapped
    /// window, a recurrent state) goes back to the last turn's rollback point
    /// when it is a prefix of `ids`, and starts over only when it is not.
    pub fn prepare(&mut self, ids: &[u32]) -> Result<usize> {
        self.prepare_prompt(&Prompt::text(ids.to_vec()))
    }

    /// [`Session::prepare`] for a prompt with images or audio: an item
    /// counts as common only when the same pixels or samples sit at the
    /// same place, and reuse never ends inside one.
    pub fn prepare_prompt(&mut self, prompt: &Prompt) -> Result<usize> {
        let ids = &prompt.ids[..];
        let held = self.seq.ids().len();
        let mut common = self.seq.ids().iter().zip(ids).take_while(|(a, b)| a == b).count();
        let new: Vec<(usize, u64, usize)> =
            prompt.starts.iter().zip(&prompt.media).map(|(&s, i)| (s, i.hash, i.tokens())).collect();
        for &(start, hash, n) in &new {
            let same = self.cached_media.contains(&(start, hash));
            if start < common && (!same || start + n > common) {
                common = start;
            }
        }
        for &(start, hash) in &self.cached_media {
            if start < common && !new.iter().any(|&(s, h, _)| (s, h) == (start, hash)) {
                common = start;
            }
        }
        // At least one token must be fed to get logits for the next one.
        if common == ids.len() {
            common = common.saturating_sub(1);
        }
        // Every cache must hold exactly the ids recorded (a recurrent state
        // cannot give back the step the decode loop queued ahead).
        let in_step = self.seq.caches().iter().all(|c| c.lock().offset() == held as i64);
        if in_step && self.seq.trim(held - common) {
            self.media_before(common);
            return Ok(common);
        }
        if let Some(cp) = &self.rollback {
            let at = cp.tokens() as usize;
            if at <= common && self.seq.restore(cp).is_ok() {
                self.media_before(at);
                return Ok(at);
            }
        }
        self.reset()?;
        Ok(0)
    }

    /// Keeps the media that start in the first `len` tokens (what the
    /// sequence still holds).
    fn media_before(&mut self, len: usize) {
        self.cached_media.retain(|&(s, _)| s < len);
    }

    /// Embeds the images and clips of `prompt` that the prefill from
    /// `start` feeds (those seen before are reused) and gives the sequence
    /// its media: each item's rows and, for families that place
    /// images in 2-D, the positions of the whole sequence. Returns the time
    /// spent in the towers.
    pub(crate) fn attach_media(&mut self, prompt: &Prompt, start: usize) -> Result<MediaTime> {
        if prompt.media.is_empty() {
            self.seq.media = None;
            self.media_rows.clear();
            return Ok(MediaTime::default());
        }
        let mut time = MediaTime {
            image_tokens: prompt.tokens_of(MediaKind::Image),
            audio_tokens: prompt.tokens_of(MediaKind::Audio),
            ..MediaTime::default()
        };
        for kind in [MediaKind::Image, MediaKind::Audio] {
            let todo: Vec<_> = prompt
                .media
                .iter()
                .zip(&prompt.starts)
                .filter(|(m, &s)| m.kind == kind && s + m.tokens() > start && !self.media_rows.contains_key(&m.hash))
                .map(|(m, _)| m.clone())
                .collect();
            if todo.is_empty() {
                continue;
            }
            let t0 = Instant::now();
            let processed = todo.iter().map(|m| m.processed.clone()).collect();
            let rows = match kind {
                MediaKind::Image => self.model.embed_images(processed)?,
                MediaKind::Audio => self.model.embed_audio(processed)?,
            };
            mlx::eval(&rows.iter().collect::<Vec<_>>())?;
            for (m, r) in todo.iter().zip(rows) {
                self.media_rows.insert(m.hash, r);
            }
            match kind {
                MediaKind::Image => time.vision_s = t0.elapsed().as_secs_f64(),
                MediaKind::Audio => time.audio_s = t0.elapsed().as_secs_f64(),
            }
        }
        self.media_rows.retain(|h, _| prompt.media.iter().any(|m| m.hash == *h));
        let spans = prompt
            .starts
            .iter()
            .zip(&prompt.media)
            .filter(|(&s, m)| s + m.tokens() > start)
            .map(|(&s, m)| MediaSpan {
                start: s,
                rows: self.media_rows[&m.hash].clone(),
                whole: m.kind == MediaKind::Image,
            })
            .collect();
        let images: Vec<_> =
            prompt.media.iter().filter(|m| m.kind == MediaKind::Image).map(|m| m.processed.clone()).collect();
        let (positions, delta) = match self.model.positions(&prompt.ids, &images)? {
            Some((p, d)) => (Some(p), d),
            None => (None, 0),
        };
        self.seq.media = Some(MediaState { spans, positions, delta });
        Ok(time)
    }

    /// Generates a reply to `ids` (the whole conversation so far), reusing
    /// the cached prefix, with the drafter when one is loaded. Returns the
    /// stats and how many prompt tokens were actually prefilled.
    pub fn generate(
        &mut self,
        ids: &[u32],
        p: &GenParams,
        on_token: impl FnMut(u32) -> bool,
    ) -> Result<(GenStats, usize)> {
        self.generate_prompt(&Prompt::text(ids.to_vec()), p, on_token)
    }

    /// [`Session::generate`] for a prompt that may carry images and audio.
    /// With media the plain loop runs (drafters see no media).
    pub fn generate_prompt(
        &mut self,
        prompt: &Prompt,
        p: &GenParams,
        on_token: impl FnMut(u32) -> bool,
    ) -> Result<(GenStats, usize)> {
        self.turn(prompt, p, |s, tail, p, media| match media {
            false => s.run(tail, p, on_token),
            true => generate(&mut s.model, &mut s.seq, tail, p, on_token),
        })
    }

    /// One turn: reuse the cached prefix of `prompt`, embed its media, run
    /// `run(self, tail, params, has_media)` on the rest, and remember what
    /// the caches then hold. Returns the stats and the tokens prefilled.
    fn turn(
        &mut self,
        prompt: &Prompt,
        p: &GenParams,
        run: impl FnOnce(&mut Self, &[u32], &GenParams, bool) -> Result<GenStats>,
    ) -> Result<(GenStats, usize)> {
        let ids = &prompt.ids[..];
        let start = self.prepare_prompt(prompt)?;
        let p = &GenParams { keep_prompt_rollback: true, ..p.clone() };
        let run = match self.attach_media(prompt, start) {
            Ok(time) => run(self, &ids[start..], p, !prompt.media.is_empty()).map(|mut s| {
                if !prompt.media.is_empty() {
                    s.add_media_time(&time);
                }
                s
            }),
            Err(e) => Err(e),
        };
        let mut stats = match run {
            Ok(s) => s,
            Err(e) => {
                // The caches may hold a partial prefill: forget them.
                self.reset()?;
                return Err(e);
            }
        };
        self.rollback = stats.prompt_rollback.take();
        self.cached_media = prompt.starts.iter().zip(&prompt.media).map(|(&s, i)| (s, i.hash)).collect();
        // The last generated token was never fed back, the rest were.
        self.seq.set_ids(ids.to_vec());
        if let Some((_, fed)) = stats.tokens.split_last() {
            self.seq.push_ids(fed);
        }
        Ok((stats, ids.len() - start))
    }

    /// Generates after `prompt` from the caches as they are (no prefix
    /// reuse, nothing remembered): with the drafter when one is loaded.
    pub fn run(&mut self, prompt: &[u32], p: &GenParams, on_token: impl FnMut(u32) -> bool) -> Result<GenStats> {
        match self.drafter.as_mut() {
            Some(d) => generate_speculative(&mut self.model, &mut self.seq, d, prompt, p, &self.spec, on_token)
                .map_err(crate::memory::explain),
            None => generate(&mut self.model, &mut self.seq, prompt, p, on_token),
        }
    }

    /// Empties the caches and forgets what they held.
    pub fn reset(&mut self) -> Result<()> {
        self.forget();
        self.seq.reset()
    }

    /// Forgets what the caches hold (they are about to be replaced), and
    /// the media embeddings (a reloaded family may embed them otherwise).
    pub fn forget(&mut self) {
        self.seq.set_ids(Vec::new());
        self.cached_media.clear();
        self.media_rows.clear();
        self.rollback = None;
    }

    /// Swaps in another build of the serving family (hot reload), rebuilding
    /// the model from the weights in memory and the target's own draft head
    /// from the new build. The caches survive when the new plan asks for the
    /// same cache layout, else the sequence starts over; returns whether
    /// they did.
    pub fn swap_family(&mut self, fam: Arc<FamilyEntry>) -> Result<bool> {
        let kept = self.model.swap_family(fam)?;
        if !kept {
            self.seq = self.model.sequence()?;
        }
        if self.drafter.as_ref().is_some_and(|d| d.source == DraftSource::OwnHead) {
            self.drafter = match Drafter::from_target(&self.model) {
                Ok(d) => d,
                Err(e) => {
                    eprintln!("famlx: warning: speculative decoding off after the reload: {e:#}");
                    None
                }
            };
        }
        if !kept {
            self.forget();
        }
        Ok(kept)
    }

    /// The checkpoint's tensors that no part of the model reads: neither the
    /// model's build nor the family's own drafter (tried now if none was
    /// built, so an MTP head left off with `--no-mtp` does not count).
    pub fn unused_tensors(&self) -> Vec<String> {
        if self.drafter.is_none() {
            // Only its reads matter: a head that cannot be built was reported where it was asked for.
            let _ = Drafter::from_target(&self.model);
        }
        self.model.weights.unread()
    }
}
