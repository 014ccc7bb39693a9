//! Images and audio clips of the engine's requests (decoded already by the
//! front end): processed for the model, their markers expanded into
//! placeholder runs, the towers run once at admission, and a prompt-cache
//! key in which each item's run stands for its pixels or samples.

use super::request::{DecodedPart, EngineError};
use crate::model::{LoadedModel, MediaSpan, MediaState};
use crate::prompt::{expand_markers, MediaKind, Prompt};

/// The prompt of `ids` (the rendered messages, one marker per item) with
/// `parts` (decoded already) processed by the family, each marker expanded
/// into the item's placeholders.
pub fn prompt(model: &LoadedModel, ids: Vec<u32>, parts: Vec<DecodedPart>) -> Result<Prompt, EngineError> {
    let Some(first) = parts.first().map(|p| p.param.clone()) else {
        return Ok(Prompt::text(ids));
    };
    let items = parts
        .into_iter()
        .map(|p| p.decoded.process(model, &p.param).map_err(|e| EngineError::invalid(&p.param, format!("{e:#}"))))
        .collect::<Result<Vec<_>, _>>()?;
    let spec = model.plan.media.as_ref().into_option();
    let spec = spec.ok_or_else(|| EngineError::invalid(&first, "this model takes no images or audio"))?;
    let bad = |e: anyhow::Error| EngineError::invalid("messages", format!("{e:#}"));
    let ids = expand_markers(&ids, spec, &items).map_err(bad)?;
    Prompt::with_media(ids, Some(spec), items).map_err(bad)
}

/// Runs the towers over the prompt's items past the first `cached`
/// tokens (those before are in the caches already): what a prefill of the
/// row splices in, and the rotary positions of families that place images
/// in 2-D (with the shift of every later position).
pub fn embed(model: &mut LoadedModel, prompt: &Prompt, cached: usize) -> Result<MediaState, EngineError> {
    let failed = |e: anyhow::Error| EngineError::internal(format!("embedding the request's media failed: {e:#}"));
    let todo: Vec<_> = prompt.media.iter().zip(&prompt.starts).filter(|(m, &s)| s + m.tokens() > cached).collect();
    let of = |kind: MediaKind| todo.iter().filter(|(m, _)| m.kind == kind).map(|(m, _)| m.processed.clone()).collect();
    let (images, clips): (Vec<_>, Vec<_>) = (of(MediaKind::Image), of(MediaKind::Audio));
    let mut image_rows =
        if images.is_empty() { Vec::new() } else { model.embed_images(images).map_err(failed)? }.into_iter();
    let mut clip_rows =
        if clips.is_empty() { Vec::new() } else { model.embed_audio(clips).map_err(failed)? }.into_iter();
    let mut spans = Vec::new();
    for (m, &start) in todo {
        let rows = match m.kind {
            MediaKind::Image => image_rows.next(),
            MediaKind::Audio => clip_rows.next(),
        };
        let rows = rows.ok_or_else(|| EngineError::internal("the towers returned fewer items than given"))?;
        spans.push(MediaSpan { start, rows, whole: m.kind == MediaKind::Image });
    }
    mlx::eval(&spans.iter().map(|s| &s.rows).collect::<Vec<_>>()).map_err(|e| failed(e.into()))?;
    // Positions cover the whole sequence, every image included.
    let all_images: Vec<_> =
        prompt.media.iter().filter(|m| m.kind == MediaKind::Image).map(|m| m.processed.clone()).collect();
    let (positions, delta) = match model.positions(&prompt.ids, &all_images).map_err(failed)? {
        Some((p, d)) => (Some(p), d),
        None => (None, 0),
    };
    Ok(MediaState { spans, positions, delta })
}

/// The prompt-cache key of `prompt`: its ids, with each item's placeholder
/// run replaced by ids past any vocabulary drawn from the item's hash. Two
/// prompts then share a cached prefix through an item only when it is the
/// same picture or sound at the same place.
pub fn prefix_key(prompt: &Prompt) -> Vec<u32> {
    let mut key = prompt.ids.clone();
    for (m, &start) in prompt.media.iter().zip(&prompt.starts) {
        for (i, t) in key[start..start + m.tokens()].iter_mut().enumerate() {
            let h = m.hash.wrapping_add((i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            *t = 0x8000_0000 | (h >> 33) as u32;
        }
    }
    key
}

/// Whether `n` cached tokens end inside an item (reuse must not: an image's
/// placeholders are fed in one forward).
pub fn cuts_item(prompt: &Prompt, n: usize) -> bool {
    prompt.media.iter().zip(&prompt.starts).any(|(m, &s)| s < n && n < s + m.tokens())
}
