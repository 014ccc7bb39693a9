//! Images and audio clips in a prompt: loaded and made into model inputs by
//! the family's media processors, their markers in the rendered template
//! expanded into placeholder tokens, and the placeholder runs of the final
//! ids matched to the items (so `--prompt-ids` expanded elsewhere is
//! checked too).

use crate::model::LoadedModel;
use anyhow::{anyhow, bail, Result};
use plugin_api::{MediaSpec, Placeholders, ProcessedMedia};
use std::path::PathBuf;
use std::rc::Rc;

/// What a media item is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MediaKind {
    /// A picture, through the vision tower.
    Image,
    /// A sound clip, through the audio tower.
    Audio,
}

impl MediaKind {
    /// "image" / "audio".
    pub fn name(self) -> &'static str {
        match self {
            MediaKind::Image => "image",
            MediaKind::Audio => "audio",
        }
    }

    /// "images" / "audio", as in "takes no ...".
    pub fn plural(self) -> &'static str {
        match self {
            MediaKind::Image => "images",
            MediaKind::Audio => "audio",
        }
    }

    /// "image" / "audio clip": one item.
    pub fn noun(self) -> &'static str {
        match self {
            MediaKind::Image => "image",
            MediaKind::Audio => "audio clip",
        }
    }

    /// How the model's prompts carry this kind, if it takes it.
    pub fn placeholders(self, spec: &MediaSpec) -> Option<&Placeholders> {
        match self {
            MediaKind::Image => spec.image_spec(),
            MediaKind::Audio => spec.audio_spec(),
        }
    }
}

/// An image or audio clip of a prompt, processed for the model.
#[derive(Debug)]
pub struct PromptMedia {
    /// Where it came from (for messages).
    pub path: PathBuf,
    /// Image or audio.
    pub kind: MediaKind,
    /// A hash of its pixels or samples: the same item at the same place is
    /// a prompt-cache hit.
    pub hash: u64,
    /// The family's processor output.
    pub processed: ProcessedMedia,
}

impl PromptMedia {
    /// Placeholder tokens the item takes.
    pub fn tokens(&self) -> usize {
        self.processed.tokens as usize
    }
}

/// A prompt's ids and its media items in the order of their placeholder
/// runs, each with the position of its first placeholder token.
#[derive(Debug, Clone, Default)]
pub struct Prompt {
    /// Token ids, placeholders expanded.
    pub ids: Vec<u32>,
    /// The images and clips, in prompt order.
    pub media: Vec<Rc<PromptMedia>>,
    /// Where each item's placeholder run starts in `ids`.
    pub starts: Vec<usize>,
}

impl Prompt {
    /// A text prompt.
    pub fn text(ids: Vec<u32>) -> Prompt {
        Prompt { ids, ..Prompt::default() }
    }

    /// A prompt of `ids` with `media` (images and clips, each kind in its
    /// prompt order), the placeholder runs checked against them.
    pub fn with_media(ids: Vec<u32>, spec: Option<&MediaSpec>, media: Vec<Rc<PromptMedia>>) -> Result<Prompt> {
        let Some(spec) = spec else {
            if let Some(m) = media.first() {
                bail!("this model takes no {}", m.kind.plural());
            }
            return Ok(Prompt::text(ids));
        };
        let mut placed: Vec<(usize, Rc<PromptMedia>)> = Vec::new();
        for kind in [MediaKind::Image, MediaKind::Audio] {
            let items: Vec<Rc<PromptMedia>> = media.iter().filter(|m| m.kind == kind).cloned().collect();
            let Some(p) = kind.placeholders(spec) else {
                if !items.is_empty() {
                    bail!("this model takes no {}", kind.plural());
                }
                continue;
            };
            let starts = spans(&ids, p.token_id, kind, &items)?;
            placed.extend(starts.into_iter().zip(items));
        }
        placed.sort_by_key(|(s, _)| *s);
        let (starts, media) = placed.into_iter().unzip();
        Ok(Prompt { ids, media, starts })
    }

    /// Placeholder tokens of the items of `kind`.
    pub fn tokens_of(&self, kind: MediaKind) -> usize {
        self.media.iter().filter(|m| m.kind == kind).map(|m| m.tokens()).sum()
    }

    /// Whether the prompt has an item of `kind`.
    pub fn has(&self, kind: MediaKind) -> bool {
        self.media.iter().any(|m| m.kind == kind)
    }
}

/// Loads, decodes and processes the images at `paths` for `model`.
pub fn load_images(model: &LoadedModel, paths: &[PathBuf]) -> Result<Vec<Rc<PromptMedia>>> {
    load_media(model, MediaKind::Image, paths)
}

/// Loads, decodes, resamples and processes the WAV files at `paths` for `model`.
pub fn load_audio_clips(model: &LoadedModel, paths: &[PathBuf]) -> Result<Vec<Rc<PromptMedia>>> {
    load_media(model, MediaKind::Audio, paths)
}

fn load_media(model: &LoadedModel, kind: MediaKind, paths: &[PathBuf]) -> Result<Vec<Rc<PromptMedia>>> {
    if paths.is_empty() {
        return Ok(Vec::new());
    }
    if !takes(model, kind) {
        bail!("--{}: {}", kind.name(), takes_none(model, kind));
    }
    paths
        .iter()
        .map(|path| {
            let decoded = match kind {
                MediaKind::Image => Decoded::Image(crate::image_file::load_image(path)?),
                MediaKind::Audio => Decoded::Audio(crate::audio::load_audio(path)?),
            };
            process(model, path.clone(), decoded)
        })
        .collect()
}

fn takes(model: &LoadedModel, kind: MediaKind) -> bool {
    model.plan.media.as_ref().into_option().and_then(|s| kind.placeholders(s)).is_some()
}

fn takes_none(model: &LoadedModel, kind: MediaKind) -> String {
    format!(
        "the {} model at hand takes no {} (inputs: {})",
        model.plan.model_type,
        kind.plural(),
        model.plan.modalities.iter().map(|m| m.as_str()).collect::<Vec<_>>().join(", ")
    )
}

/// A decoded item, before the family's processor.
pub enum Decoded {
    /// A picture's pixels.
    Image(plugin_api::RawImage),
    /// A clip's samples at the towers' rate.
    Audio(crate::audio::RawAudio),
}

impl Decoded {
    /// An image or WAV file's bytes decoded (`name` for errors).
    pub fn from_bytes(kind: MediaKind, data: &[u8], name: &str) -> Result<Decoded> {
        Ok(match kind {
            MediaKind::Image => Decoded::Image(crate::image_file::decode_image(data, name)?),
            MediaKind::Audio => Decoded::Audio(crate::audio::decode_audio(data, name)?),
        })
    }

    /// What it is.
    pub fn kind(&self) -> MediaKind {
        match self {
            Decoded::Image(_) => MediaKind::Image,
            Decoded::Audio(_) => MediaKind::Audio,
        }
    }

    /// The bytes it holds.
    pub fn bytes(&self) -> usize {
        match self {
            Decoded::Image(i) => i.rgb.len() + i.alpha.len(),
            Decoded::Audio(a) => a.samples.len() * std::mem::size_of::<f32>(),
        }
    }

    /// Made into the model's input by its family's processor.
    pub fn process(self, model: &LoadedModel, name: &str) -> Result<Rc<PromptMedia>> {
        if !takes(model, self.kind()) {
            bail!("{}", takes_none(model, self.kind()));
        }
        process(model, PathBuf::from(name), self)
    }
}

/// Whether `model` takes `kind`, and if not, the line that says so.
pub fn takes_kind(model: &LoadedModel, kind: MediaKind) -> Result<(), String> {
    if takes(model, kind) {
        Ok(())
    } else {
        Err(takes_none(model, kind))
    }
}

fn process(model: &LoadedModel, path: PathBuf, decoded: Decoded) -> Result<Rc<PromptMedia>> {
    let family = &model.family.family;
    let (kind, processed, hash) = match decoded {
        Decoded::Image(raw) => {
            (MediaKind::Image, family.process_image(&model.plan, &raw), crate::image_file::pixel_hash(&raw))
        }
        Decoded::Audio(clip) => {
            let hash = crate::audio::sample_hash(&clip.samples);
            let raw = plugin_api::RawAudio { samples: clip.samples.into(), sample_rate: crate::audio::SAMPLE_RATE };
            (MediaKind::Audio, family.process_audio(&model.plan, &raw), hash)
        }
    };
    let processed = processed.into_result().map_err(|e| anyhow!("{} {}: {e}", kind.name(), path.display()))?;
    Ok(Rc::new(PromptMedia { path, kind, hash, processed }))
}

/// Replaces the i-th marker of each kind in `ids` with the i-th item of
/// that kind's placeholders (`prefix + token × N + suffix`).
pub fn expand_markers(ids: &[u32], spec: &MediaSpec, media: &[Rc<PromptMedia>]) -> Result<Vec<u32>> {
    let mut out = ids.to_vec();
    for kind in [MediaKind::Image, MediaKind::Audio] {
        let items: Vec<&Rc<PromptMedia>> = media.iter().filter(|m| m.kind == kind).collect();
        let Some(p) = kind.placeholders(spec) else {
            if !items.is_empty() {
                bail!("this model takes no {}", kind.plural());
            }
            continue;
        };
        let found = out.iter().filter(|&&t| t == p.marker).count();
        if found != items.len() {
            let what = kind.noun();
            bail!(
                "the prompt places {found} {what}{} (token {}) for {} given",
                if found == 1 { "" } else { "s" },
                p.marker,
                items.len()
            );
        }
        let mut next = items.iter();
        let mut expanded = Vec::with_capacity(out.len() + items.iter().map(|i| i.tokens() + 2).sum::<usize>());
        for &t in &out {
            if t == p.marker {
                if let Some(item) = next.next() {
                    expanded.extend_from_slice(&p.prefix);
                    expanded.extend(std::iter::repeat_n(p.token_id, item.tokens()));
                    expanded.extend_from_slice(&p.suffix);
                    continue;
                }
            }
            expanded.push(t);
        }
        out = expanded;
    }
    Ok(out)
}

/// The start of each run of `token` in `ids`, checked to be one run per
/// item of `kind`, each as long as its item's placeholder count.
fn spans(ids: &[u32], token: u32, kind: MediaKind, items: &[Rc<PromptMedia>]) -> Result<Vec<usize>> {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for (i, &t) in ids.iter().enumerate() {
        if t != token {
            continue;
        }
        match runs.last_mut() {
            Some((s, n)) if *s + *n == i => *n += 1,
            _ => runs.push((i, 1)),
        }
    }
    let what = kind.noun();
    if runs.len() != items.len() {
        bail!(
            "the prompt has {} {} placeholder run{} (token {token}) but {} {what}{} given",
            runs.len(),
            kind.name(),
            if runs.len() == 1 { "" } else { "s" },
            items.len(),
            if items.len() == 1 { " was" } else { "s were" }
        );
    }
    for (k, ((_, n), item)) in runs.iter().zip(items).enumerate() {
        if *n != item.tokens() {
            bail!(
                "{what} {} ({}): the prompt has {n} placeholder tokens for it, the {} gives {}",
                k + 1,
                item.path.display(),
                kind.name(),
                item.tokens()
            );
        }
    }
    Ok(runs.into_iter().map(|(s, _)| s).collect())
}
