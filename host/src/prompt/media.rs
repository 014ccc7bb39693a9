//! Images in a prompt: loaded and made into model inputs by the family's
//! media processor, their markers in the rendered template expanded into
//! placeholder tokens, and the placeholder runs of the final ids matched to
//! the images (so `--prompt-ids` expanded elsewhere is checked too).

use crate::model::LoadedModel;
use anyhow::{anyhow, bail, Result};
use plugin_api::{MediaSpec, ProcessedImage};
use std::path::PathBuf;
use std::rc::Rc;

/// An image of a prompt, processed for the model.
#[derive(Debug)]
pub struct PromptImage {
    /// Where it came from (for messages).
    pub path: PathBuf,
    /// A hash of its pixels: the same picture at the same place is a
    /// prompt-cache hit.
    pub hash: u64,
    /// The family's processor output.
    pub processed: ProcessedImage,
}

impl PromptImage {
    /// Placeholder tokens the image takes.
    pub fn tokens(&self) -> usize {
        self.processed.tokens as usize
    }
}

/// A prompt's ids and its images, each with the position of its first
/// placeholder token.
#[derive(Debug, Clone, Default)]
pub struct Prompt {
    /// Token ids, placeholders expanded.
    pub ids: Vec<u32>,
    /// The images in order.
    pub images: Vec<Rc<PromptImage>>,
    /// Where each image's placeholder run starts in `ids`.
    pub starts: Vec<usize>,
}

impl Prompt {
    /// A text prompt.
    pub fn text(ids: Vec<u32>) -> Prompt {
        Prompt { ids, ..Prompt::default() }
    }

    /// A prompt of `ids` with `images`, its placeholder runs checked
    /// against them (a model that takes images also checks that a prompt
    /// without any has no stray placeholders).
    pub fn with_images(ids: Vec<u32>, media: Option<&MediaSpec>, images: Vec<Rc<PromptImage>>) -> Result<Prompt> {
        let Some(spec) = media else {
            if !images.is_empty() {
                bail!("this model takes no images");
            }
            return Ok(Prompt::text(ids));
        };
        let starts = image_spans(&ids, spec.image_token_id, &images)?;
        Ok(Prompt { ids, images, starts })
    }

    /// Placeholder tokens of all images.
    pub fn image_tokens(&self) -> usize {
        self.images.iter().map(|i| i.tokens()).sum()
    }
}

/// Loads, decodes and processes the images at `paths` for `model`.
pub fn load_images(model: &LoadedModel, paths: &[PathBuf]) -> Result<Vec<Rc<PromptImage>>> {
    if paths.is_empty() {
        return Ok(Vec::new());
    }
    if model.plan.media.is_none() {
        bail!(
            "--image: the {} model at hand takes no images (inputs: {})",
            model.plan.model_type,
            model.plan.modalities.iter().map(|m| m.as_str()).collect::<Vec<_>>().join(", ")
        );
    }
    paths
        .iter()
        .map(|path| {
            let raw = crate::media::load_image(path)?;
            let processed = model
                .family
                .family
                .process_image(&model.plan, &raw)
                .into_result()
                .map_err(|e| anyhow!("image {}: {e}", path.display()))?;
            Ok(Rc::new(PromptImage { path: path.clone(), hash: crate::media::pixel_hash(&raw), processed }))
        })
        .collect()
}

/// Replaces the i-th image marker of `ids` with the i-th image's
/// placeholders (`prefix + token × N + suffix`).
pub fn expand_markers(ids: &[u32], spec: &MediaSpec, images: &[Rc<PromptImage>]) -> Result<Vec<u32>> {
    let found = ids.iter().filter(|&&t| t == spec.image_marker).count();
    if found != images.len() {
        bail!(
            "the prompt places {found} image{} (token {}) for {} given",
            if found == 1 { "" } else { "s" },
            spec.image_marker,
            images.len()
        );
    }
    let mut out = Vec::with_capacity(ids.len() + images.iter().map(|i| i.tokens() + 2).sum::<usize>());
    let mut next = images.iter();
    for &t in ids {
        if t == spec.image_marker {
            if let Some(img) = next.next() {
                out.extend_from_slice(&spec.image_prefix);
                out.extend(std::iter::repeat_n(spec.image_token_id, img.tokens()));
                out.extend_from_slice(&spec.image_suffix);
                continue;
            }
        }
        out.push(t);
    }
    Ok(out)
}

/// The start of each run of `image_token` in `ids`, checked to be one run
/// per image, each as long as its image's placeholder count.
pub fn image_spans(ids: &[u32], image_token: u32, images: &[Rc<PromptImage>]) -> Result<Vec<usize>> {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for (i, &t) in ids.iter().enumerate() {
        if t != image_token {
            continue;
        }
        match runs.last_mut() {
            Some((s, n)) if *s + *n == i => *n += 1,
            _ => runs.push((i, 1)),
        }
    }
    if runs.len() != images.len() {
        bail!(
            "the prompt has {} image placeholder run{} (token {image_token}) but {} image{} given",
            runs.len(),
            if runs.len() == 1 { "" } else { "s" },
            images.len(),
            if images.len() == 1 { " was" } else { "s were" }
        );
    }
    for (k, ((_, n), img)) in runs.iter().zip(images).enumerate() {
        if *n != img.tokens() {
            bail!(
                "image {} ({}): the prompt has {n} placeholder tokens for it, the image gives {}",
                k + 1,
                img.path.display(),
                img.tokens()
            );
        }
    }
    Ok(runs.into_iter().map(|(s, _)| s).collect())
}
