//! The `famlx` command line: the subcommands, each in its own module, over
//! the arguments they share ([`args`]) and the setup they share (`setup`).

pub mod args;
mod bench;
mod chat;
mod convert;
mod generate;
mod launch;
mod plugins;
mod serve;
mod setup;

use args::{CachePromptArgs, ChatArgs, GenerateArgs, NewPluginArgs, PluginArgs};
pub use bench::BenchArgs;
use clap::{Parser, Subcommand};
pub use convert::ConvertArgs;
pub use serve::ServeArgs;

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
    Bench(BenchArgs),
    /// Convert a checkpoint to an mlx-community folder: quantize,
    /// dequantize, cast, re-shard, or GGUF to safetensors (like `mlx_lm.convert`).
    Convert(ConvertArgs),
    /// Serve the model over an OpenAI-compatible HTTP API (like `mlx_lm.server`).
    Serve(ServeArgs),
    /// List plugins found, loaded and refused.
    Plugins(PluginArgs),
    /// Run a famlx command as the ranks of one distributed group, locally
    /// or over ssh (like `mlx.launch`): `famlx launch -n 2 -- generate …`.
    Launch(launch::LaunchArgs),
    /// Make a family plugin (`famlx plugin new NAME`).
    Plugin {
        /// What to do.
        #[command(subcommand)]
        command: PluginCommand,
    },
    /// Prefill a prompt and save the caches to a file for `generate
    /// --prompt-cache-file` (like `mlx_lm.cache_prompt`).
    CachePrompt(CachePromptArgs),
}

/// `famlx plugin` subcommands.
#[derive(Subcommand, Debug)]
pub enum PluginCommand {
    /// Write a new out-of-tree family plugin: the template (a Llama-style
    /// decoder from the shared layers) with the plugin SDK vendored, ready
    /// for `cargo build --release`.
    New(NewPluginArgs),
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    mlx::check_runtime()?;
    match cli.command {
        Command::Generate(a) => generate::run(a),
        Command::Chat(a) => chat::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Convert(a) => convert::run(a),
        Command::Serve(a) => serve::run(a),
        Command::Plugins(a) => plugins::run(a),
        // One local rank runs in this process: its command line parsed as
        // the binary's own (a usage error ends the process as one would).
        Command::Launch(a) => launch::run(a, |argv| {
            let line = std::iter::once("famlx".to_string()).chain(argv);
            run(Cli::try_parse_from(line).unwrap_or_else(|e| e.exit()))
        }),
        Command::Plugin { command: PluginCommand::New(a) } => plugins::new(a),
        Command::CachePrompt(a) => generate::run_cache_prompt(a),
    }
}
