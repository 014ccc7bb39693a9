//! From parsed arguments to a running session: the plugin registry, the
//! model and its drafter, generation parameters, the prompt's ids.

use super::args::{CacheArgs, ModelArgs, PromptArgs, SamplingArgs, SpecArgs, Think};
use crate::decode::{Drafter, GenParams, SpecParams};
use crate::default_model;
use crate::model::LoadedModel;
use crate::plugins::{plugin_search_path, Registry};
use crate::prompt::{chat_prompt, expand_markers, load_audio_clips, load_images, parse_ids, Message, Prompt};
use crate::sample::SamplerParams;
use crate::session::Session;
use anyhow::{anyhow, bail, Result};
use serde_json::{Map, Value};
use std::io::IsTerminal;
use std::path::PathBuf;

/// Loads the model `m` names with the cache settings `c` into a session;
/// with `spec`, also its drafter (a `--draft-model`, else the checkpoint's
/// own draft head unless `--no-mtp`). With `watch`, the checkpoint's tensors
/// stay in memory for hot reloads.
pub(crate) fn load(m: &ModelArgs, c: &CacheArgs, spec: Option<&SpecArgs>, watch: bool) -> Result<Session> {
    let params = SpecParams {
        depth: spec.and_then(|s| s.depth).unwrap_or(SpecParams::default().depth),
        min_confidence: spec.map_or(0.0, |s| s.min_confidence),
    };
    params.validate()?;
    crate::distributed::join(m.parallel.into())?;
    let path = match m.model.as_deref() {
        Some(name) => crate::hub::resolve_model(name, m.revision.as_deref())?,
        None => default_model::resolve(None)?,
    };
    let reg = registry(&m.plugin_dirs, watch)?;
    let opts = c.cache_options()?;
    for w in opts.warnings() {
        eprintln!("famlx: warning: {w}");
    }
    if let Some(l) = c.memory_limit {
        crate::memory::set_limit(l);
    }
    let bar = progress(&format!("loading {}", path.display()));
    let model = LoadedModel::load(&path, &reg, m.family.as_deref(), opts);
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let mut model = model.map_err(crate::memory::explain)?;
    for (kind, why) in model.disable_media_without_tower() {
        eprintln!("famlx: warning: {}: {kind} input is off: {why}", path.display());
    }
    if let Some(n) = m.image_tokens {
        model.set_image_tokens(n)?;
    }
    let plan = &model.plan;
    tracing::info!(
        "loaded {} ({} plugin): {} cache slots, vocabulary {}, context {}, stored as {}, inputs {}",
        plan.model_type,
        plan.family,
        plan.caches.len(),
        plan.vocab_size,
        plan.max_position_embeddings,
        plan.dtype,
        plan.modalities.iter().map(|m| m.as_str()).collect::<Vec<_>>().join(", ")
    );
    for w in model.cache_opts.warnings_for(&model.plan) {
        eprintln!("famlx: warning: {w}");
    }
    for w in model.tokenizer.iter().flat_map(|t| t.warnings()) {
        eprintln!("famlx: warning: {w}");
    }
    if !watch {
        model.release_source();
    }
    let mut s = Session::new(model)?;
    s.spec = params;
    // The speculative loop chooses between trimming and restoring snapshots
    // by the caches it holds, which differ between the ranks of a pipeline
    // split: they would take different paths.
    let pipeline = mlx::nn::Parallel::pipeline(crate::distributed::parallel()).is_some();
    let spec = match spec {
        Some(sp) if pipeline && (sp.draft_model.is_some() || sp.depth.is_some()) => {
            bail!("speculative decoding does not run with --parallel pipeline; use --parallel tensor or --no-mtp")
        }
        Some(_) if pipeline => None,
        other => other,
    };
    s.drafter = match spec {
        Some(SpecArgs { draft_model: Some(dir), .. }) => {
            Some(Drafter::load(dir, &reg, None, &s.model).map_err(crate::memory::explain)?)
        }
        Some(sp) if !sp.no_mtp => match Drafter::from_target(&s.model) {
            Ok(d) => d,
            // The checkpoint's own draft head is optional: a broken one
            // leaves the model serving without it, unless it was asked for.
            Err(e) if sp.depth.is_none() => {
                eprintln!("famlx: warning: speculative decoding off: {e:#}");
                None
            }
            Err(e) => return Err(e.context("--mtp-depth was given")),
        },
        _ => None,
    };
    // A rank of a pipeline split leaves the other ranks' layers unread.
    let unused = if pipeline { Vec::new() } else { s.unused_tensors() };
    if !unused.is_empty() {
        let msg = format!(
            "{}: {} of the checkpoint {} not used by the {} plugin: {}",
            path.display(),
            crate::model::count(unused.len(), "tensor"),
            if unused.len() == 1 { "is" } else { "are" },
            s.model.family.name,
            mlx::nn::fold_names(&unused)
        );
        if m.strict {
            bail!("{msg} (--strict)");
        }
        eprintln!("famlx: warning: {msg}");
    }
    if let Some(d) = &s.drafter {
        tracing::info!("speculative decoding: {} drafter ({}), depth {}", d.family, d.source, s.spec.depth);
    }
    // Keep freed buffers around for reuse, but not without bound.
    mlx::memory::set_cache_limit(mlx::memory::active().max(1 << 30));
    Ok(s)
}

/// Generation parameters from the flags, checked against their rules; stop
/// tokens from the model's config and tokenizer.
pub(crate) fn params(s: &SamplingArgs, c: &CacheArgs, model: &LoadedModel) -> Result<GenParams> {
    if let Some(seed) = s.seed {
        mlx::random::seed(seed)?;
    }
    if !(0.0..=1.0).contains(&s.top_p) {
        bail!("--top-p must be in [0, 1], got {}", s.top_p);
    }
    if !(s.temperature.is_finite() && s.temperature >= 0.0) {
        bail!("--temperature must be a finite number ≥ 0, got {}", s.temperature);
    }
    if !(0.0..=1.0).contains(&s.min_p) {
        bail!("--min-p must be in [0, 1], got {}", s.min_p);
    }
    if s.top_k < 0 {
        bail!("--top-k must be ≥ 0 (0: off), got {}", s.top_k);
    }
    if c.prefill_step_size == 0 {
        bail!("--prefill-step-size must be ≥ 1");
    }
    let mut stop: Vec<u32> = model.plan.eos_ids.iter().copied().collect();
    if let Some(t) = &model.tokenizer {
        for id in t.eos_ids() {
            if !stop.contains(&id) {
                stop.push(id);
            }
        }
    }
    Ok(GenParams {
        max_tokens: s.max_tokens,
        sampler: SamplerParams { temperature: s.temperature, top_p: s.top_p, top_k: s.top_k, min_p: s.min_p },
        prefill_step: c.prefill_step_size,
        stop_ids: stop,
        ..GenParams::default()
    })
}

/// The plugins of the search path (`--plugin-dir` first, each checked:
/// one that is not a folder is an error), warnings printed.
pub(crate) fn registry(dirs: &[PathBuf], fresh: bool) -> Result<Registry> {
    let r = Registry::discover_with(&plugin_search_path(dirs)?, fresh);
    for w in &r.warnings {
        eprintln!("famlx: warning: {w}");
    }
    for f in &r.refused {
        // The reason starts with the path.
        eprintln!("famlx: warning: refused plugin {}", f.reason);
    }
    Ok(r)
}

/// A spinner on stderr while `msg` runs (terminals only).
fn progress(msg: &str) -> Option<indicatif::ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let b = indicatif::ProgressBar::new_spinner();
    b.set_message(msg.to_string());
    b.enable_steady_tick(std::time::Duration::from_millis(120));
    Some(b)
}

/// The chat template's keyword arguments for a thinking mode.
pub(crate) fn template_kwargs(think: Think) -> Map<String, Value> {
    let mut m = Map::new();
    match think {
        Think::On => {
            m.insert("enable_thinking".into(), Value::Bool(true));
        }
        Think::Off => {
            m.insert("enable_thinking".into(), Value::Bool(false));
        }
        Think::Default => {}
    }
    m
}

/// The prompt's token ids: `ids` as given, else `text` templated (or raw).
pub(crate) fn encode_prompt(model: &LoadedModel, a: &PromptArgs) -> Result<Vec<u32>> {
    Ok(encode_prompt_with_media(model, a, &[], &[])?.ids)
}

/// The prompt with the images at `images` and the clips at `audio`: ids as
/// given (their placeholder runs checked against the items), else the text
/// templated with the items before it (or raw, its markers expanded).
pub(crate) fn encode_prompt_with_media(
    model: &LoadedModel,
    a: &PromptArgs,
    images: &[PathBuf],
    audio: &[PathBuf],
) -> Result<Prompt> {
    let mut items = load_images(model, images)?;
    items.extend(load_audio_clips(model, audio)?);
    let images = items;
    let media = model.plan.media.as_ref().into_option();
    let prompt = if let Some(ids) = &a.prompt_ids {
        Prompt::with_media(parse_ids(ids)?, media, images)?
    } else {
        let text = a.prompt.as_deref().unwrap_or("Hello!");
        let tok = model.tokenizer()?;
        if a.raw {
            let mut ids = tok.encode(text, true).map_err(|e| anyhow!("{e}"))?;
            if let Some(spec) = media.filter(|_| !images.is_empty()) {
                ids = expand_markers(&ids, spec, &images)?;
            }
            Prompt::with_media(ids, media, images)?
        } else {
            let mut msgs = Vec::new();
            if let Some(s) = &a.system {
                msgs.push(Message::new("system", s));
            }
            msgs.push(Message::with_media("user", text, images));
            chat_prompt(tok, media, &msgs, &template_kwargs(a.think))?
        }
    };
    if let Some(&bad) = prompt.ids.iter().find(|&&i| i >= model.plan.vocab_size) {
        bail!("prompt token id {bad} is outside the vocabulary ({} tokens)", model.plan.vocab_size);
    }
    Ok(prompt)
}
