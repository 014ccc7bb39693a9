//! The command line's arguments, grouped as the subcommands share them.

use crate::cache::CacheOptions;
use anyhow::Result;
use clap::builder::RangedU64ValueParser;
use clap::{Args, ValueEnum};
use std::path::PathBuf;

/// The most a flag counting tokens (or token positions) may say: MLX holds
/// shapes and positions as `i32`.
pub const MAX_TOKENS_FLAG: u64 = i32::MAX as u64;

/// The parser of an integer flag that may be at most `max`: a larger value
/// is a usage error naming the flag, never truncated where it is used.
pub fn at_most(max: u64) -> RangedU64ValueParser<usize> {
    RangedU64ValueParser::<usize>::new().range(0..=max)
}

/// Where plugins and the model come from.
#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// Checkpoint folder, .gguf file (a split one by its first part), Hugging
    /// Face repo id (org/name, fetched into the HF cache; a GGUF repo as
    /// org/NAME-GGUF:Q4_K_M picks that quantization's file), or the default's
    /// name (default: SmolLM2-135M-Instruct).
    #[arg(long)]
    pub model: Option<String>,
    /// Hub revision (branch, tag or commit) when --model is a repo id.
    #[arg(long)]
    pub revision: Option<String>,
    /// Extra plugin directory (searched first; repeatable).
    #[arg(long = "plugin-dir")]
    pub plugin_dirs: Vec<PathBuf>,
    /// Use this family even if another plugin claims the model_type first.
    #[arg(long)]
    pub family: Option<String>,
    /// Refuse a checkpoint with tensors the model does not use (by default a warning).
    #[arg(long)]
    pub strict: bool,
    /// Most placeholder tokens per image, instead of the checkpoint's
    /// processor config (gemma4: 70, 140, 280, 560 or 1120; qwen3_5: the
    /// pixel budget, 32x32 pixels per token).
    #[arg(long = "image-tokens", value_name = "N")]
    pub image_tokens: Option<u32>,
    /// When run as ranks (`famlx launch`, `mlx.launch`): split the model's
    /// heads and MLP columns over the ranks (`tensor`), or its layers (`pipeline`).
    #[arg(long, value_enum, default_value_t = ParallelArg::Tensor)]
    pub parallel: ParallelArg,
}

/// `--parallel`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParallelArg {
    /// Heads and MLP columns split; partial outputs summed over the ranks.
    Tensor,
    /// Layers split; activations passed from rank to rank.
    Pipeline,
}

impl From<ParallelArg> for mlx::nn::ParallelMode {
    fn from(p: ParallelArg) -> Self {
        match p {
            ParallelArg::Tensor => mlx::nn::ParallelMode::Tensor,
            ParallelArg::Pipeline => mlx::nn::ParallelMode::Pipeline,
        }
    }
}

/// Sampling flags (mlx-lm's names).
#[derive(Args, Debug, Clone)]
pub struct SamplingArgs {
    /// Most tokens to generate.
    #[arg(long = "max-tokens", short = 'm', default_value_t = 256, value_parser = at_most(MAX_TOKENS_FLAG))]
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

/// How the prompt is fed and what the KV caches keep (mlx-lm's names where
/// it has them).
#[derive(Args, Debug, Clone)]
pub struct CacheArgs {
    /// Prompt tokens per prefill chunk.
    #[arg(long = "prefill-step-size", default_value_t = 2048, value_parser = at_most(MAX_TOKENS_FLAG))]
    pub prefill_step_size: usize,
    /// Bound the KV cache to this many tokens (a sliding window keeping the first 4).
    #[arg(long = "max-kv-size", value_parser = at_most(MAX_TOKENS_FLAG))]
    pub max_kv_size: Option<usize>,
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
    #[arg(long = "quantized-kv-start", default_value_t = 0, value_parser = at_most(MAX_TOKENS_FLAG))]
    pub quantized_kv_start: usize,
    /// Stop with an error when MLX memory in use passes this (bytes, or e.g. 512M, 8G).
    #[arg(long = "memory-limit", value_parser = crate::memory::parse_bytes)]
    pub memory_limit: Option<usize>,
}

impl CacheArgs {
    /// The cache settings these flags ask for (checked; warnings not printed).
    pub fn cache_options(&self) -> Result<CacheOptions> {
        let c = self;
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
    /// Prefill and KV caches.
    #[command(flatten)]
    pub cache: CacheArgs,
    /// Speculative decoding.
    #[command(flatten)]
    pub spec: SpecArgs,
    /// The prompt.
    #[command(flatten)]
    pub prompt: PromptArgs,
    /// An image for the prompt (repeatable; PNG, JPEG, WebP or GIF): placed
    /// before the text, in order. With --prompt-ids the ids must already
    /// hold its placeholder tokens.
    #[arg(long = "image", value_name = "PATH")]
    pub images: Vec<PathBuf>,
    /// An audio clip for the prompt (repeatable; WAV, any rate, mixed down
    /// to mono and resampled to 16 kHz): placed after the images, before
    /// the text, in order. With --prompt-ids the ids must already hold its
    /// placeholder tokens.
    #[arg(long = "audio", value_name = "PATH")]
    pub audio: Vec<PathBuf>,
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
    /// Also write the logits of every prompt position to this JSON file
    /// (`{"ids": [..], "logits": [[..], ..]}`, float32), for comparing a
    /// family with the reference (scripts/compare_logits.py runs mlx-lm on
    /// the same ids).
    #[arg(long = "dump-logits", value_name = "FILE")]
    pub dump_logits: Option<PathBuf>,
}

/// `famlx cache-prompt`.
#[derive(Args, Debug)]
pub struct CachePromptArgs {
    /// Model and plugins.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Prefill and KV caches.
    #[command(flatten)]
    pub cache: CacheArgs,
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
    /// Prefill and KV caches.
    #[command(flatten)]
    pub cache: CacheArgs,
    /// Speculative decoding.
    #[command(flatten)]
    pub spec: SpecArgs,
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

/// `famlx plugin new`.
#[derive(Args, Debug)]
pub struct NewPluginArgs {
    /// The family's name: its crate, library and `model_type` (lowercase
    /// letters, digits, `_`).
    pub name: String,
    /// Folder to create (default: `./famlx-plugin-NAME`).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

/// `famlx plugins`.
#[derive(Args, Debug)]
pub struct PluginArgs {
    /// Extra plugin directory (searched first; repeatable).
    #[arg(long = "plugin-dir")]
    pub plugin_dirs: Vec<PathBuf>,
    /// Print what was found as JSON (plugins, families, each model type
    /// with its example checkpoints and features; refused files).
    #[arg(long, conflicts_with = "table")]
    pub json: bool,
    /// Print the supported-models table (Markdown, as in the README).
    #[arg(long)]
    pub table: bool,
}
