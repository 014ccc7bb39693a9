//! `famlx bench`: prompt and generation speed, following `mlx_lm.benchmark`.
//!
//! A prompt of random token ids (seeded, drawn as mlx-lm draws it: the global
//! MLX seed, then `randint(0, vocab, [1, p])`) is run once to warm up and then
//! `n` more times, each on fresh caches. Every run generates exactly `g`
//! tokens (no stop tokens). Per run: prompt tok/s = prompt length / time to
//! the first token; generation tok/s = tokens after the first / time after
//! the first; peak MLX memory during the run.
//!
//! With `--image` the prompt starts with each image's placeholder block and
//! the random ids follow; every run embeds the images afresh (the vision
//! tower's time counts in the time to first token, and is also reported).

use super::args::{at_most, CacheArgs, ModelArgs, SamplingArgs, SpecArgs, MAX_TOKENS_FLAG};
use super::setup::{load, params};
use crate::decode::{GenParams, GenStats};
use crate::prompt::{expand_markers, load_audio_clips, load_images, MediaKind, Prompt};
use crate::session::Session;
use anyhow::{bail, Result};
use clap::Args;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Instant;

/// `famlx bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Prompt length in tokens.
    #[arg(long = "prompt-tokens", short = 'p', default_value_t = 512, value_parser = at_most(MAX_TOKENS_FLAG))]
    pub prompt_tokens: usize,
    /// Tokens to generate per trial.
    #[arg(long = "generation-tokens", short = 'g', default_value_t = 128, value_parser = at_most(MAX_TOKENS_FLAG))]
    pub generation_tokens: usize,
    /// Batch size (only 1 for now).
    #[arg(long = "batch-size", short = 'b', default_value_t = 1)]
    pub batch_size: usize,
    /// Timed trials after the warm-up.
    #[arg(long = "num-trials", short = 'n', default_value_t = 5)]
    pub num_trials: usize,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Model and plugins.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Sampling flags (greedy by default; `--seed` also seeds the prompt
    /// ids, 0 when absent; `-g`, not `--max-tokens`, sets the count).
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Prefill and KV caches.
    #[command(flatten)]
    pub cache: CacheArgs,
    /// Speculative decoding.
    #[command(flatten)]
    pub spec: SpecArgs,
    /// An image to put before the random prompt ids (repeatable): each
    /// adds its placeholder tokens to the prompt and its vision tower time
    /// to the time to first token.
    #[arg(long = "image", value_name = "PATH")]
    pub images: Vec<PathBuf>,
    /// An audio clip (WAV) to put after the images, before the random
    /// prompt ids (repeatable): each adds its placeholder tokens to the
    /// prompt and its audio tower time to the time to first token.
    #[arg(long = "audio", value_name = "PATH")]
    pub audio: Vec<PathBuf>,
}

/// What one run measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Trial {
    /// Prompt tokens / time to the first token.
    pub prompt_tps: f64,
    /// Tokens after the first / time after the first.
    pub generation_tps: f64,
    /// Peak MLX memory during the run, bytes.
    pub peak_memory_bytes: usize,
    /// Wall time of the whole run, seconds.
    pub total_time_s: f64,
    /// Time to the first token, seconds (vision tower included).
    pub ttft_s: f64,
    /// Seconds in the vision tower (0 without images).
    pub vision_s: f64,
    /// Seconds in the audio tower (0 without audio).
    pub audio_s: f64,
    /// Where the decode time went (plain decoding only).
    pub split: Option<crate::decode::DecodeSplit>,
}

impl Trial {
    fn from_stats(s: &GenStats, total_time_s: f64) -> Trial {
        Trial {
            prompt_tps: s.prompt_tps,
            generation_tps: s.generation_tps,
            peak_memory_bytes: s.peak_memory_bytes,
            total_time_s,
            ttft_s: if s.prompt_tps > 0.0 { s.prompt_tokens as f64 / s.prompt_tps } else { 0.0 },
            vision_s: s.vision_s,
            audio_s: s.audio_s,
            split: s.split,
        }
    }

    /// The trial as a JSON object.
    pub fn to_json(self) -> Value {
        let mut v = json!({
            "prompt_tps": self.prompt_tps,
            "generation_tps": self.generation_tps,
            "peak_memory_bytes": self.peak_memory_bytes,
            "peak_memory_gb": self.peak_memory_bytes as f64 / 1e9,
            "total_time_s": self.total_time_s,
            "ttft_s": self.ttft_s,
            "vision_s": self.vision_s,
            "audio_s": self.audio_s,
        });
        if let Some(s) = self.split {
            v["decode_build_s"] = json!(s.build_s);
            v["decode_wait_s"] = json!(s.wait_s);
            v["decode_launch_s"] = json!(s.launch_s);
        }
        v
    }
}

/// Average and median of each figure over the trials.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    /// Mean of each figure.
    pub average: Trial,
    /// Median of each figure (taken figure by figure).
    pub median: Trial,
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => 0.0,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// Summarises `trials` figure by figure.
pub fn summarize(trials: &[Trial]) -> Summary {
    let col = |f: fn(&Trial) -> f64| trials.iter().map(f).collect::<Vec<f64>>();
    let (p, g, m, t) = (
        col(|t| t.prompt_tps),
        col(|t| t.generation_tps),
        col(|t| t.peak_memory_bytes as f64),
        col(|t| t.total_time_s),
    );
    let (ttft, vision, audio) = (col(|t| t.ttft_s), col(|t| t.vision_s), col(|t| t.audio_s));
    let splits: Option<Vec<_>> = trials.iter().map(|t| t.split).collect();
    let split_of = |f: fn(&[f64]) -> f64| {
        let v = splits.as_ref().filter(|v| !v.is_empty())?;
        let pick = |g: fn(&crate::decode::DecodeSplit) -> f64| f(&v.iter().map(g).collect::<Vec<f64>>());
        Some(crate::decode::DecodeSplit {
            build_s: pick(|s| s.build_s),
            wait_s: pick(|s| s.wait_s),
            launch_s: pick(|s| s.launch_s),
        })
    };
    Summary {
        average: Trial {
            prompt_tps: mean(&p),
            generation_tps: mean(&g),
            peak_memory_bytes: mean(&m).round() as usize,
            total_time_s: mean(&t),
            ttft_s: mean(&ttft),
            vision_s: mean(&vision),
            audio_s: mean(&audio),
            split: split_of(mean),
        },
        median: Trial {
            prompt_tps: median(&p),
            generation_tps: median(&g),
            peak_memory_bytes: median(&m).round() as usize,
            total_time_s: median(&t),
            ttft_s: median(&ttft),
            vision_s: median(&vision),
            audio_s: median(&audio),
            split: split_of(median),
        },
    }
}

/// The table printed without `--json`: one row per trial, then the averages
/// and medians.
pub fn table(trials: &[Trial]) -> String {
    let s = summarize(trials);
    let mut out = format!(
        "{:>8}  {:>12}  {:>16}  {:>15}  {:>12}\n",
        "trial", "prompt_tps", "generation_tps", "peak_memory_gb", "total_time_s"
    );
    let row = |label: &str, t: &Trial| {
        format!(
            "{:>8}  {:>12.3}  {:>16.3}  {:>15.3}  {:>12.3}\n",
            label,
            t.prompt_tps,
            t.generation_tps,
            t.peak_memory_bytes as f64 / 1e9,
            t.total_time_s
        )
    };
    for (i, t) in trials.iter().enumerate() {
        out += &row(&(i + 1).to_string(), t);
    }
    out += &row("average", &s.average);
    out += &row("median", &s.median);
    out
}

/// Primitives that (on contiguous inputs, as in a decode step) only
/// re-describe memory and launch no kernel. On a GPU a step's host time goes
/// mostly to the other nodes' launches, so `nodes - views` is the figure
/// to compare between tools (`scripts/mlx_lm_census.py` uses the same list).
const VIEW_PRIMITIVES: [&str; 9] =
    ["Slice", "Reshape", "Split", "Squeeze", "ExpandDims", "Transpose", "Flatten", "Unflatten", "Broadcast"];

/// The decode step's census as `{"nodes": total, "views": view nodes,
/// "by_primitive": {name: n}}` (null for a speculative run, which has no
/// plain decode step).
fn census_json(c: Option<&[(String, usize)]>) -> Value {
    let Some(c) = c else { return Value::Null };
    let by: serde_json::Map<String, Value> = c.iter().map(|(k, n)| (k.clone(), json!(n))).collect();
    let views: usize = c.iter().filter(|(k, _)| VIEW_PRIMITIVES.contains(&k.as_str())).map(|(_, n)| n).sum();
    json!({"nodes": c.iter().map(|(_, n)| n).sum::<usize>(), "views": views, "by_primitive": by})
}

/// Random prompt ids in `[0, vocab)`, drawn as `mlx_lm.benchmark` draws them
/// (`mx.random.seed(seed)`, then `mx.random.randint(0, vocab, (1, n))`), so
/// the same seed gives both tools the same prompt.
pub fn random_prompt(vocab: u32, n: usize, seed: u64) -> Result<Vec<u32>> {
    let (Ok(high), Ok(len)) = (i32::try_from(vocab), i32::try_from(n)) else {
        bail!("cannot draw {n} prompt ids from a vocabulary of {vocab} tokens (at most {} of each)", i32::MAX);
    };
    if high == 0 {
        bail!("cannot draw prompt ids from a vocabulary of {vocab} tokens");
    }
    mlx::random::seed(seed)?;
    let ids = mlx::random::randint(0, high, &[1, len], mlx::Dtype::I32, None)?;
    Ok(ids.to_vec::<i32>()?.into_iter().map(|i| i as u32).collect())
}

/// The bench prompt: each `--image`'s then each `--audio`'s placeholder
/// block, then `-p` random ids. A random id that is one of the model's
/// media tokens would make another placeholder run: refused (another
/// `--seed` draws other ids).
fn bench_prompt(s: &Session, a: &BenchArgs, seed: u64) -> Result<Prompt> {
    let text = random_prompt(s.model.plan.vocab_size, a.prompt_tokens, seed)?;
    let mut items = load_images(&s.model, &a.images)?;
    items.extend(load_audio_clips(&s.model, &a.audio)?);
    let Some(spec) = s.model.plan.media.as_ref().into_option().filter(|_| !items.is_empty()) else {
        return Ok(Prompt::text(text));
    };
    let kinds = [MediaKind::Image, MediaKind::Audio];
    let media_ids: Vec<u32> = kinds.iter().filter_map(|k| k.placeholders(spec)).flat_map(|p| p.ids()).collect();
    if let Some(t) = text.iter().find(|t| media_ids.contains(t)) {
        bail!("the random prompt (--seed {seed}) drew the media token {t}; pass another --seed");
    }
    let markers: Vec<u32> = items.iter().filter_map(|m| m.kind.placeholders(spec).map(|p| p.marker)).collect();
    let mut ids = expand_markers(&markers, spec, &items)?;
    ids.extend(text);
    Prompt::with_media(ids, Some(spec), items)
}

/// `--max-tokens`'s default, read from the flag's definition.
fn default_max_tokens() -> Option<usize> {
    let cmd = <SamplingArgs as Args>::augment_args(clap::Command::new("bench"));
    let arg = cmd.get_arguments().find(|a| a.get_id() == "max_tokens")?;
    arg.get_default_values().first()?.to_str()?.parse().ok()
}

/// Runs `famlx bench`.
pub fn run(a: BenchArgs) -> Result<()> {
    if a.batch_size != 1 {
        bail!("--batch-size {}: only batch size 1 is supported for now", a.batch_size);
    }
    if a.prompt_tokens == 0 || a.generation_tokens == 0 || a.num_trials == 0 {
        bail!("--prompt-tokens, --generation-tokens and --num-trials must all be ≥ 1");
    }
    if Some(a.sampling.max_tokens) != default_max_tokens() {
        bail!("famlx bench generates -g/--generation-tokens tokens per trial; --max-tokens does not apply");
    }
    let mut s = load(&a.model, &a.cache, Some(&a.spec), false)?;
    let mut p = params(&a.sampling, &a.cache, &s.model)?;
    p.max_tokens = a.generation_tokens;
    let seed = a.sampling.seed.unwrap_or(0);
    // Every run generates exactly -g tokens: prompt and generation must fit
    // (checked before the prompt is drawn, then again with its media).
    let fits = |prompt_len: usize| s.model.context_room(prompt_len + a.generation_tokens).is_ok();
    if !fits(a.prompt_tokens) {
        bail!(
            "-p {} + -g {} = {} tokens, more than the model's context of {} tokens; \
             pass --max-kv-size N to bench with a sliding window",
            a.prompt_tokens,
            a.generation_tokens,
            a.prompt_tokens + a.generation_tokens,
            s.model.plan.max_position_embeddings
        );
    }
    let prompt = bench_prompt(&s, &a, seed)?;
    let image_tokens = prompt.tokens_of(MediaKind::Image);
    let audio_tokens = prompt.tokens_of(MediaKind::Audio);
    let total = prompt.ids.len() + a.generation_tokens;
    if !fits(prompt.ids.len()) {
        let images = if prompt.media.is_empty() {
            String::new()
        } else {
            format!(" + {} media tokens", prompt.ids.len() - a.prompt_tokens)
        };
        bail!(
            "-p {}{images} + -g {} = {total} tokens, more than the model's context of {} tokens; \
             pass --max-kv-size N to bench with a sliding window",
            a.prompt_tokens,
            a.generation_tokens,
            s.model.plan.max_position_embeddings
        );
    }
    // No stop tokens: every run generates exactly -g tokens.
    p.stop_ids.clear();
    if let Some(s) = a.sampling.seed {
        // Sampling (temperature > 0) starts from the same state in every process.
        mlx::random::seed(s)?;
    }
    let model_name = a.model.model.clone().unwrap_or_else(|| "default".into());
    let run_once = |s: &mut Session, p: &GenParams| -> Result<(Trial, GenStats)> {
        // Also forgets the media embeddings: each run pays the towers.
        s.reset()?;
        let t0 = Instant::now();
        let stats = if prompt.media.is_empty() {
            s.run(&prompt.ids, p, |_| true)?
        } else {
            s.generate_prompt(&prompt, p, |_| true)?.0
        };
        let total = t0.elapsed().as_secs_f64();
        if stats.tokens.len() != a.generation_tokens {
            bail!("generated {} tokens instead of {}", stats.tokens.len(), a.generation_tokens);
        }
        Ok((Trial::from_stats(&stats, total), stats))
    };
    if !a.json {
        eprintln!("Running warmup..");
    }
    // The warm-up also counts what one decode step asks MLX to run.
    let (warmup, warm_stats) = run_once(&mut s, &GenParams { census: true, ..p.clone() })?;
    // What the weights hold, measured with no cache or activation alive (after
    // the first run, which also evaluates weights the load left lazy, such
    // as fused projections).
    s.reset()?;
    let model_bytes = mlx::memory::active();
    if !a.json {
        println!(
            "famlx bench: model={model_name} family={} prompt_tokens={} generation_tokens={} batch_size={} seed={seed} backend={}",
            s.model.family.name,
            a.prompt_tokens,
            a.generation_tokens,
            a.batch_size,
            mlx::device::backend()
        );
    }
    // Not sized by -n ahead: the trials come one by one, and -n is unbounded.
    let mut trials = Vec::new();
    for i in 0..a.num_trials {
        let (t, _) = run_once(&mut s, &p)?;
        if !a.json {
            let mut vision = if image_tokens > 0 { format!(", vision={:.3}", t.vision_s) } else { String::new() };
            if audio_tokens > 0 {
                vision += &format!(", audio={:.3}", t.audio_s);
            }
            eprintln!(
                "Trial {}:  prompt_tps={:.3}, generation_tps={:.3}, peak_memory={:.3}, total_time={:.3}, ttft={:.3}{vision}",
                i + 1,
                t.prompt_tps,
                t.generation_tps,
                t.peak_memory_bytes as f64 / 1e9,
                t.total_time_s,
                t.ttft_s
            );
        }
        trials.push(t);
    }
    if a.json {
        let summary = summarize(&trials);
        let mut out = json!({
            "model": model_name,
            "family": s.model.family.name.to_string(),
            "prompt_tokens": a.prompt_tokens,
            "generation_tokens": a.generation_tokens,
            "images": a.images.len(),
            "image_tokens": image_tokens,
            "audio": a.audio.len(),
            "audio_tokens": audio_tokens,
            "batch_size": a.batch_size,
            "num_trials": a.num_trials,
            "seed": seed,
            "backend": mlx::device::backend().to_string(),
            "mlx_version": mlx::runtime_version(),
            "model_memory_bytes": model_bytes,
            "warmup": warmup.to_json(),
            "decode_graph": census_json(warm_stats.census.as_deref()),
            "trials": trials.iter().copied().map(Trial::to_json).collect::<Vec<_>>(),
            "average": summary.average.to_json(),
            "median": summary.median.to_json(),
        });
        if !prompt.media.is_empty() {
            // The whole prompt, so another tool can be fed the same ids.
            out["prompt_ids"] = json!(prompt.ids);
        }
        println!("{out}");
    } else {
        print!("{}", table(&trials));
        println!("model memory: {:.3} GB", model_bytes as f64 / 1e9);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(p: f64, g: f64, m: usize) -> Trial {
        Trial {
            prompt_tps: p,
            generation_tps: g,
            peak_memory_bytes: m,
            total_time_s: 1.0,
            ttft_s: 0.5,
            vision_s: 0.0,
            audio_s: 0.0,
            split: None,
        }
    }

    #[test]
    fn summary_averages_and_medians_each_figure() {
        let s = summarize(&[t(100.0, 10.0, 3), t(300.0, 30.0, 1), t(200.0, 50.0, 2)]);
        assert_eq!(s.average.prompt_tps, 200.0);
        assert_eq!(s.average.generation_tps, 30.0);
        assert_eq!(s.average.peak_memory_bytes, 2);
        assert_eq!(s.median.prompt_tps, 200.0);
        assert_eq!(s.median.generation_tps, 30.0);
        let even = summarize(&[t(1.0, 2.0, 0), t(3.0, 4.0, 0)]);
        assert_eq!(even.median.prompt_tps, 2.0);
        assert_eq!(even.median.generation_tps, 3.0);
    }

    #[test]
    fn the_decode_split_is_summarised_only_when_every_trial_has_one() {
        use crate::decode::DecodeSplit;
        let with = |b: f64, w: f64| Trial {
            split: Some(DecodeSplit { build_s: b, wait_s: w, launch_s: b / 2.0 }),
            ..t(1.0, 1.0, 0)
        };
        let s = summarize(&[with(1.0, 4.0), with(3.0, 0.0), with(2.0, 2.0)]);
        assert_eq!(s.average.split, Some(DecodeSplit { build_s: 2.0, wait_s: 2.0, launch_s: 1.0 }));
        assert_eq!(s.median.split, Some(DecodeSplit { build_s: 2.0, wait_s: 2.0, launch_s: 1.0 }));
        assert_eq!(summarize(&[with(1.0, 1.0), t(1.0, 1.0, 0)]).median.split, None);
        assert_eq!(summarize(&[]).median.split, None);
    }

    #[test]
    fn prompt_ids_match_mlx_lm_benchmark() {
        // mlx 0.32.4: mx.random.seed(0); mx.random.randint(0, 32000, (1, 8))
        let ids = random_prompt(32000, 8, 0).unwrap();
        assert_eq!(ids, [16767, 9450, 20871, 25818, 3849, 21056, 14884, 26555]);
    }

    #[test]
    fn census_counts_views_apart() {
        let c = [("Matmul".to_string(), 3), ("Slice".to_string(), 2), ("Reshape".to_string(), 1)];
        let v = census_json(Some(&c));
        assert_eq!((v["nodes"].as_u64(), v["views"].as_u64()), (Some(6), Some(3)), "{v}");
        assert_eq!(v["by_primitive"]["Matmul"], 3);
        assert!(census_json(None).is_null());
    }

    #[test]
    fn table_has_a_row_per_trial_plus_average_and_median() {
        let s = table(&[t(1.0, 2.0, 1_000_000_000), t(3.0, 4.0, 0)]);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines.len(), 5);
        assert!(lines[0].contains("prompt_tps"));
        assert!(lines[3].trim_start().starts_with("average"));
        assert!(lines[4].trim_start().starts_with("median"));
        assert!(lines[1].contains("1.000"));
    }
}
