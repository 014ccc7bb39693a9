//! `famlx generate` and `famlx cache-prompt`.

use super::args::{CachePromptArgs, GenerateArgs};
use super::setup::{encode_prompt, encode_prompt_with_media, load, params};
use crate::decode::{prefill_last_alone, GenStats};
use crate::plugins::search_dirs;
use crate::reload::{reload_if_changed, PluginWatcher, Reload};
use crate::session::Session;
use anyhow::Result;
use serde_json::{json, Value};
use std::io::Write;
use std::time::Duration;

/// Runs `famlx generate`.
pub(crate) fn run(a: GenerateArgs) -> Result<()> {
    if a.prompt_cache_file.is_some() {
        // A split model's caches are per rank: one file cannot hold them.
        crate::distributed::refuse("generate --prompt-cache-file")?;
    }
    if a.watch {
        crate::distributed::refuse("generate --watch")?;
    }
    let mut s = load(&a.model, &a.cache, Some(&a.spec), a.watch)?;
    let watcher = if a.watch { Some(PluginWatcher::new(&search_dirs(&a.model.plugin_dirs))?) } else { None };
    generate_once(&a, &mut s)?;
    let Some(w) = watcher else { return Ok(()) };
    loop {
        let changed = w.changed(Duration::from_secs(3600));
        match reload_if_changed(&mut s, &changed) {
            Reload::Unrelated => continue,
            Reload::Failed(msg) => eprintln!("{msg}"),
            Reload::Swapped(msg) => {
                eprintln!("{msg}");
                s.reset()?;
                generate_once(&a, &mut s)?;
            }
        }
    }
}

/// Runs `famlx cache-prompt`.
pub(crate) fn run_cache_prompt(a: CachePromptArgs) -> Result<()> {
    crate::distributed::refuse("cache-prompt")?;
    let Session { mut model, mut seq, .. } = load(&a.model, &a.cache, None, false)?;
    let ids = encode_prompt(&model, &a.prompt)?;
    // As mlx-lm's cache_prompt: the whole prompt goes into the caches (its last token alone).
    prefill_last_alone(&mut model, &mut seq, &ids, a.cache.prefill_step_size.max(1)).map_err(crate::memory::explain)?;
    seq.eval_caches()?;
    seq.save_prompt_cache(&model, &a.prompt_cache_file, &ids)?;
    eprintln!("Saved {} prompt tokens to {}", ids.len(), a.prompt_cache_file.display());
    Ok(())
}

fn generate_once(a: &GenerateArgs, s: &mut Session) -> Result<()> {
    let mut p = params(&a.sampling, &a.cache, &s.model)?;
    let prompt = encode_prompt_with_media(&s.model, &a.prompt, &a.images, &a.audio)?;
    if let Some(room) = s.model.context_room(prompt.ids.len())? {
        p.max_tokens = p.max_tokens.min(room);
    }
    if let Some(path) = &a.dump_logits {
        dump_logits(s, &prompt, path)?;
    }
    // Without a file nothing is cached: the whole prompt is prefilled.
    s.forget();
    if let Some(f) = &a.prompt_cache_file {
        if !prompt.media.is_empty() {
            anyhow::bail!(
                "--prompt-cache-file: prompt caches hold text only; leave out --image/--audio or the cache file"
            );
        }
        s.seq.load_prompt_cache(&s.model, f)?;
    }
    let mut detok = s.model.tokenizer.as_ref().map(|t| t.detokenizer());
    let mut text = String::new();
    let stream = !a.json;
    let stop_ids = p.stop_ids.clone();
    let (stats, prefilled) = s.generate_prompt(&prompt, &p, |id| {
        if stop_ids.contains(&id) {
            return true;
        }
        if let Some(d) = detok.as_mut() {
            let piece = d.push(id);
            if stream {
                print!("{piece}");
                let _ = std::io::stdout().flush();
            }
            text.push_str(&piece);
        }
        true
    })?;
    if let Some(d) = detok.as_mut() {
        let piece = d.finish();
        if stream {
            print!("{piece}");
        }
        text.push_str(&piece);
    }
    if a.json {
        let mut j = stats_json(&stats, &text);
        j["prefilled_tokens"] = prefilled.into();
        j["cached_tokens"] = (prompt.ids.len() - prefilled).into();
        println!("{j}");
    } else {
        println!();
        eprintln!("==========");
        print_stats(&stats);
    }
    let _ = std::io::stdout().flush();
    Ok(())
}

/// `--dump-logits`: one forward over the whole prompt (its images
/// embedded) from empty caches, every position's logits as float32 JSON.
fn dump_logits(s: &mut Session, prompt: &crate::prompt::Prompt, path: &std::path::Path) -> Result<()> {
    use anyhow::Context;
    s.reset()?;
    s.attach_media(prompt, 0)?;
    let m = &mut s.model;
    let ids = &prompt.ids;
    let tokens = mlx::Array::from_slice(&ids.iter().map(|&i| i as i32).collect::<Vec<_>>(), &[1, ids.len() as i32])?;
    let logits = m
        .forward(&mut s.seq, &tokens, plugin_api::TokenSource::Prompt, plugin_api::LogitsWanted::All)?
        .context("--dump-logits: the model returned no logits")?
        .astype(mlx::Dtype::F32)?;
    let v = logits.dim(-1) as usize;
    let flat = logits.to_vec::<f32>()?;
    let rows: Vec<&[f32]> = flat.chunks(v.max(1)).collect();
    // Every rank of a split computed them; rank 0 writes them.
    if crate::distributed::rank() == 0 {
        let j = json!({ "model_type": m.plan.model_type.as_str(), "ids": ids, "logits": rows });
        std::fs::write(path, j.to_string()).with_context(|| format!("--dump-logits {}", path.display()))?;
        eprintln!("wrote the logits of {} prompt positions to {}", ids.len(), path.display());
    }
    s.reset()?;
    Ok(())
}

/// The `--json` object.
fn stats_json(s: &GenStats, text: &str) -> Value {
    json!({
        "prompt_tokens": s.prompt_tokens,
        "generation_tokens": s.tokens.len(),
        "tokens": s.tokens,
        "text": text,
        "prompt_tps": s.prompt_tps,
        "generation_tps": s.generation_tps,
        "peak_memory_bytes": s.peak_memory_bytes,
        "finish_reason": format!("{:?}", s.finish).to_lowercase(),
        "vision_s": s.vision_s,
        "image_tokens": s.image_tokens,
        "audio_s": s.audio_s,
        "audio_tokens": s.audio_tokens,
        "draft": s.draft.map(|d| json!({
            "proposed": d.proposed,
            "accepted": d.accepted,
            "rounds": d.rounds,
        })),
    })
}

fn print_stats(s: &GenStats) {
    eprintln!("Prompt: {} tokens, {:.3} tokens-per-sec", s.prompt_tokens, s.prompt_tps);
    eprintln!("Generation: {} tokens, {:.3} tokens-per-sec", s.tokens.len(), s.generation_tps);
    eprintln!("Peak memory: {:.3} GB", s.peak_memory_bytes as f64 / 1e9);
    if let Some(d) = s.draft {
        let rate = if d.proposed > 0 { 100.0 * d.accepted as f64 / d.proposed as f64 } else { 0.0 };
        eprintln!("Drafts: {} of {} accepted ({rate:.1}%) in {} verify steps", d.accepted, d.proposed, d.rounds);
    }
}
