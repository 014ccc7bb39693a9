//! The `famlx` command line.

use crate::cache::CacheOptions;
use crate::default_model;
use crate::generate::{GenParams, GenStats};
use crate::model::LoadedModel;
use crate::plugins::{search_dirs, Registry};
use crate::prompt::{chat_ids, parse_ids, Message};
use crate::reload::{reload_if_changed, PluginWatcher, Reload};
use crate::sample::SamplerParams;
use crate::session::PromptCache;
use crate::speculative::{Drafter, SpecParams};
use anyhow::{anyhow, bail, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use serde_json::{json, Map, Value};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;

/// LLM inference on MLX; every model family is a plugin.
#[derive(Parser, Debug)]
#[command(name = "famlx", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Generate a completion for one prompt.
    Generate(GenerateArgs),
    /// Chat interactively (REPL).
    Chat(ChatArgs),
    /// Measure prompt and generation speed (like `mlx_lm.benchmark`).
    Bench(crate::bench::BenchArgs),
    /// List plugins found, loaded and refused.
    Plugins(PluginArgs),
    /// Prefill a prompt and save the caches to a file for `generate
    /// --prompt-cache-file` (like `mlx_lm.cache_prompt`).
    CachePrompt(CachePromptArgs),
}

/// Where plugins and the model come from.
#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// Checkpoint folder, .gguf file, or the default's name (default: SmolLM2-135M-Instruct).
    #[arg(long)]
    pub model: Option<String>,
    /// Extra plugin directory (searched first; repeatable).
    #[arg(long = "plugin-dir")]
    pub plugin_dirs: Vec<PathBuf>,
    /// Use this family even if another plugin claims the model_type first.
    #[arg(long)]
    pub family: Option<String>,
    /// Refuse a checkpoint with tensors the model does not use (by default a warning).
    #[arg(long)]
    pub strict: bool,
}

/// Sampling and generation flags (mlx-lm's names).
#[derive(Args, Debug, Clone)]
pub struct SamplingArgs {
    /// Most tokens to generate.
    #[arg(long = "max-tokens", short = 'm', default_value_t = 256)]
    pub max_tokens: usize,
    // Negative numbers are taken as values (and then refused by the rule),
    // not as unknown flags.
    /// Sampling temperature (0: greedy).
    #[arg(long = "temperature", alias = "temp", default_value_t = 0.0, allow_negative_numbers = true)]
    pub temperature: f32,
    /// Nucleus sampling mass, in [0, 1].
    #[arg(long = "top-p", default_value_t = 1.0, allow_negative_numbers = true)]
    pub top_p: f32,
    /// Keep only the k most likely tokens (0: off).
    #[arg(long = "top-k", default_value_t = 0, allow_negative_numbers = true)]
    pub top_k: i32,
    /// Min-p filtering, in [0, 1] (0: off).
    #[arg(long = "min-p", default_value_t = 0.0, allow_negative_numbers = true)]
    pub min_p: f32,
    /// Random seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Prompt tokens per prefill chunk.
    #[arg(long = "prefill-step-size", default_value_t = 2048)]
    pub prefill_step_size: usize,
    /// Bound the KV cache to this many tokens (a sliding window keeping the first 4).
    #[arg(long = "max-kv-size")]
    pub max_kv_size: Option<usize>,
    /// KV cache quantization and memory bounds.
    #[command(flatten)]
    pub cache: CacheArgs,
    /// Speculative decoding.
    #[command(flatten)]
    pub spec: SpecArgs,
}

/// Speculative decoding flags.
#[derive(Args, Debug, Clone)]
pub struct SpecArgs {
    /// A draft checkpoint (e.g. a gemma4_assistant folder) to draft with.
    #[arg(long = "draft-model")]
    pub draft_model: Option<PathBuf>,
    /// Tokens drafted per verify step (1-8, default 2), by the MTP head or the
    /// draft model. Given explicitly, a checkpoint whose MTP head cannot be
    /// built is an error rather than a warning.
    #[arg(long = "mtp-depth", alias = "draft-depth", alias = "num-draft-tokens")]
    pub depth: Option<usize>,
    /// Don't use the checkpoint's own multi-token-prediction head.
    #[arg(long = "no-mtp")]
    pub no_mtp: bool,
    /// Stop a draft early once the drafter's top probability is below this (0: off).
    #[arg(long = "draft-min-confidence", default_value_t = 0.0, allow_negative_numbers = true)]
    pub min_confidence: f32,
}

/// KV cache quantization and memory flags (mlx-lm's names where it has them).
#[derive(Args, Debug, Clone)]
pub struct CacheArgs {
    /// Quantize keys and values to this many bits (2, 3, 4, 6, 8).
    #[arg(long = "kv-bits")]
    pub kv_bits: Option<i32>,
    /// Bits for keys (overrides --kv-bits).
    #[arg(long = "k-bits")]
    pub k_bits: Option<i32>,
    /// Bits for values (overrides --kv-bits).
    #[arg(long = "v-bits")]
    pub v_bits: Option<i32>,
    /// Group size of KV quantization (32, 64, 128).
    #[arg(long = "kv-group-size", default_value_t = 64)]
    pub kv_group_size: i32,
    /// Quantize the KV cache once this many tokens are cached.
    #[arg(long = "quantized-kv-start", default_value_t = 0)]
    pub quantized_kv_start: usize,
    /// Stop with an error when MLX memory in use passes this (bytes, or e.g. 512M, 8G).
    #[arg(long = "memory-limit", value_parser = crate::memory::parse_bytes)]
    pub memory_limit: Option<usize>,
}

impl SamplingArgs {
    /// The cache settings these flags ask for (checked; warnings not printed).
    pub fn cache_options(&self) -> Result<CacheOptions> {
        let c = &self.cache;
        let o = CacheOptions {
            max_kv_size: self.max_kv_size,
            k_bits: c.k_bits.or(c.kv_bits),
            v_bits: c.v_bits.or(c.kv_bits),
            kv_group_size: c.kv_group_size,
            quantized_kv_start: c.quantized_kv_start,
            ..CacheOptions::default()
        };
        o.validate()?;
        Ok(o)
    }
}

/// Thinking mode for templates that support it.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Think {
    /// enable_thinking=true
    On,
    /// enable_thinking=false
    Off,
    /// The template's default.
    Default,
}

/// What to prompt with, and how to turn it into token ids.
#[derive(Args, Debug)]
pub struct PromptArgs {
    /// The prompt text (chat-templated unless --raw).
    #[arg(long, short = 'p')]
    pub prompt: Option<String>,
    /// Prompt token ids (comma-separated; no template, no BOS added).
    #[arg(long = "prompt-ids", conflicts_with = "prompt")]
    pub prompt_ids: Option<String>,
    /// System message.
    #[arg(long)]
    pub system: Option<String>,
    /// Skip the chat template.
    #[arg(long)]
    pub raw: bool,
    /// Thinking mode.
    #[arg(long, value_enum, default_value_t = Think::Default)]
    pub think: Think,
}

/// `famlx generate`.
#[derive(Args, Debug)]
pub struct GenerateArgs {
    /// Model and plugins.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Sampling.
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// The prompt.
    #[command(flatten)]
    pub prompt: PromptArgs,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Keep running: when the serving plugin is rebuilt, reload it and
    /// generate again (for family authors iterating on a plugin).
    #[arg(long)]
    pub watch: bool,
    /// Start from the caches saved by `famlx cache-prompt`: only the part of
    /// the prompt after the cached tokens is prefilled.
    #[arg(long = "prompt-cache-file")]
    pub prompt_cache_file: Option<PathBuf>,
}

/// `famlx cache-prompt`.
#[derive(Args, Debug)]
pub struct CachePromptArgs {
    /// Model and plugins.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Cache settings (and the prefill step).
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// The prompt.
    #[command(flatten)]
    pub prompt: PromptArgs,
    /// Where to save the caches (a .safetensors file).
    #[arg(long = "prompt-cache-file")]
    pub prompt_cache_file: PathBuf,
}

/// `famlx chat`.
#[derive(Args, Debug)]
pub struct ChatArgs {
    /// Model and plugins.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Sampling.
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// System message.
    #[arg(long)]
    pub system: Option<String>,
    /// Thinking mode.
    #[arg(long, value_enum, default_value_t = Think::Default)]
    pub think: Think,
    /// Hot-reload the serving plugin when it is rebuilt.
    #[arg(long)]
    pub watch: bool,
}

/// `famlx plugins`.
#[derive(Args, Debug)]
pub struct PluginArgs {
    /// Extra plugin directory (searched first; repeatable).
    #[arg(long = "plugin-dir")]
    pub plugin_dirs: Vec<PathBuf>,
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> Result<()> {
    mlx::check_runtime()?;
    match cli.command {
        Command::Generate(a) => run_generate(a),
        Command::Chat(a) => crate::chat::run(a),
        Command::Bench(a) => crate::bench::run(a),
        Command::Plugins(a) => run_plugins(a),
        Command::CachePrompt(a) => run_cache_prompt(a),
    }
}

fn registry(dirs: &[PathBuf], fresh: bool) -> Registry {
    let r = Registry::discover_with(&search_dirs(dirs), fresh);
    for w in &r.warnings {
        eprintln!("famlx: warning: {w}");
    }
    for f in &r.refused {
        // The reason starts with the path.
        eprintln!("famlx: warning: refused plugin {}", f.reason);
    }
    r
}

pub(crate) fn load(m: &ModelArgs, s: &SamplingArgs, watch: bool) -> Result<LoadedModel> {
    let spec = SpecParams {
        depth: s.spec.depth.unwrap_or(SpecParams::default().depth),
        min_confidence: s.spec.min_confidence,
    };
    spec.validate()?;
    let path = default_model::resolve(m.model.as_deref())?;
    let reg = registry(&m.plugin_dirs, watch);
    let opts = s.cache_options()?;
    for w in opts.warnings() {
        eprintln!("famlx: warning: {w}");
    }
    if let Some(l) = s.cache.memory_limit {
        crate::memory::set_limit(l);
    }
    let bar = progress(&format!("loading {}", path.display()));
    let model = LoadedModel::load(&path, &reg, m.family.as_deref(), opts);
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let mut model = model.map_err(crate::memory::explain)?;
    for w in model.tokenizer.iter().flat_map(|t| t.warnings()) {
        eprintln!("famlx: warning: {w}");
    }
    if !watch {
        model.release_source();
    }
    model.spec = spec;
    model.drafter = match &s.spec.draft_model {
        Some(dir) => Some(Drafter::load(dir, &reg, None, &model).map_err(crate::memory::explain)?),
        None if !s.spec.no_mtp => match Drafter::from_target(&model) {
            Ok(d) => d,
            // The checkpoint's own draft head is optional: a broken one
            // leaves the model serving without it, unless it was asked for.
            Err(e) if s.spec.depth.is_none() => {
                eprintln!("famlx: warning: speculative decoding off: {e:#}");
                None
            }
            Err(e) => return Err(e.context("--mtp-depth was given")),
        },
        None => None,
    };
    let unused = model.unused_tensors();
    if !unused.is_empty() {
        let msg = format!(
            "{}: {} of the checkpoint {} not used by the {} plugin: {}",
            path.display(),
            crate::model::count(unused.len(), "tensor"),
            if unused.len() == 1 { "is" } else { "are" },
            model.family.name,
            mlx::nn::fold_names(&unused)
        );
        if m.strict {
            bail!("{msg} (--strict)");
        }
        eprintln!("famlx: warning: {msg}");
    }
    if let Some(d) = &model.drafter {
        tracing::info!("speculative decoding: {} drafter ({}), depth {}", d.family, d.source, model.spec.depth);
    }
    // Keep freed buffers around for reuse, but not without bound.
    mlx::memory::set_cache_limit(mlx::memory::active().max(1 << 30));
    Ok(model)
}

fn progress(msg: &str) -> Option<indicatif::ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let b = indicatif::ProgressBar::new_spinner();
    b.set_message(msg.to_string());
    b.enable_steady_tick(std::time::Duration::from_millis(120));
    Some(b)
}

pub(crate) fn params(s: &SamplingArgs, model: &LoadedModel) -> Result<GenParams> {
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
    if s.prefill_step_size == 0 {
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
        prefill_step: s.prefill_step_size,
        stop_ids: stop,
        checkpoint_prompt: false,
        census: false,
        cancel: None,
    })
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

fn run_generate(a: GenerateArgs) -> Result<()> {
    let mut model = load(&a.model, &a.sampling, a.watch)?;
    let watcher = if a.watch { Some(PluginWatcher::new(&search_dirs(&a.model.plugin_dirs))?) } else { None };
    generate_once(&a, &mut model)?;
    let Some(w) = watcher else { return Ok(()) };
    loop {
        let changed = w.changed(Duration::from_secs(3600));
        match reload_if_changed(&mut model, &changed) {
            Reload::Unrelated => continue,
            Reload::Failed(msg) => eprintln!("{msg}"),
            Reload::Swapped(msg) => {
                eprintln!("{msg}");
                model.reset_caches()?;
                generate_once(&a, &mut model)?;
            }
        }
    }
}

/// The prompt's token ids: `ids` as given, else `text` templated (or raw).
fn encode_prompt(model: &LoadedModel, a: &PromptArgs) -> Result<Vec<u32>> {
    let prompt: Vec<u32> = if let Some(ids) = &a.prompt_ids {
        parse_ids(ids)?
    } else {
        let text = a.prompt.as_deref().unwrap_or("Hello!");
        let tok = model.tokenizer()?;
        if a.raw {
            tok.encode(text, true).map_err(|e| anyhow!("{e}"))?
        } else {
            let mut msgs = Vec::new();
            if let Some(s) = &a.system {
                msgs.push(Message::new("system", s));
            }
            msgs.push(Message::new("user", text));
            chat_ids(tok, &msgs, &template_kwargs(a.think))?
        }
    };
    if let Some(&bad) = prompt.iter().find(|&&i| i >= model.plan.vocab_size) {
        bail!("prompt token id {bad} is outside the vocabulary ({} tokens)", model.plan.vocab_size);
    }
    Ok(prompt)
}

fn run_cache_prompt(a: CachePromptArgs) -> Result<()> {
    let mut model = load(&a.model, &a.sampling, false)?;
    let ids = encode_prompt(&model, &a.prompt)?;
    // As mlx-lm's cache_prompt: the whole prompt goes into the caches (its last token alone).
    crate::generate::prefill_last_alone(&mut model, &ids, a.sampling.prefill_step_size.max(1))
        .map_err(crate::memory::explain)?;
    model.eval_caches()?;
    model.save_prompt_cache(&a.prompt_cache_file, &ids)?;
    eprintln!("Saved {} prompt tokens to {}", ids.len(), a.prompt_cache_file.display());
    Ok(())
}

fn generate_once(a: &GenerateArgs, model: &mut LoadedModel) -> Result<()> {
    let mut p = params(&a.sampling, model)?;
    let prompt = encode_prompt(model, &a.prompt)?;
    if let Some(room) = model.context_room(prompt.len())? {
        p.max_tokens = p.max_tokens.min(room);
    }
    // Without a file this is an empty cache: the whole prompt is prefilled.
    let mut cache = PromptCache::default();
    if let Some(f) = &a.prompt_cache_file {
        cache.cached = model.load_prompt_cache(f)?;
    }
    let mut detok = model.tokenizer.as_ref().map(|t| t.detokenizer());
    let mut text = String::new();
    let stream = !a.json;
    let stop_ids = p.stop_ids.clone();
    let (stats, prefilled) = cache.generate(model, &prompt, &p, |id| {
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
        j["cached_tokens"] = (prompt.len() - prefilled).into();
        println!("{j}");
    } else {
        println!();
        eprintln!("==========");
        print_stats(&stats);
    }
    let _ = std::io::stdout().flush();
    Ok(())
}

/// The `--json` object.
pub fn stats_json(s: &GenStats, text: &str) -> Value {
    json!({
        "prompt_tokens": s.prompt_tokens,
        "generation_tokens": s.tokens.len(),
        "tokens": s.tokens,
        "text": text,
        "prompt_tps": s.prompt_tps,
        "generation_tps": s.generation_tps,
        "peak_memory_bytes": s.peak_memory_bytes,
        "finish_reason": format!("{:?}", s.finish).to_lowercase(),
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

fn run_plugins(a: PluginArgs) -> Result<()> {
    let dirs = search_dirs(&a.plugin_dirs);
    println!("search directories:");
    for d in &dirs {
        println!("  {}", d.display());
    }
    let reg = Registry::discover(&dirs);
    println!("loaded:");
    for p in &reg.plugins {
        println!("  {} ({})", p.name, p.path.display());
        for f in &p.families {
            println!(
                "    family {}: model types {} [ABI {}, MLX {}]",
                f.name,
                f.model_types.join(", "),
                plugin_api::ABI_VERSION,
                mlx::build_version()
            );
        }
    }
    if !reg.refused.is_empty() {
        println!("refused:");
        for r in &reg.refused {
            println!("  {}", r.reason);
        }
    }
    for w in &reg.warnings {
        println!("warning: {w}");
    }
    Ok(())
}
