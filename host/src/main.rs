//! The `famlx` binary.

use clap::Parser;

fn main() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("FAMLX_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,famlx::serve=info"));
    // Colour only on a terminal: escape codes in a log file or a pipe are noise.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi).init();
    let cli = famlx::cli::Cli::parse();
    let r = famlx::cli::run(cli);
    // Work still queued on MLX's stream thread (a command that failed
    // mid-generation) must finish before exit: MLX's static destructors would
    // free memory that thread still uses (heap corruption). `generate` itself
    // returns with nothing in flight.
    let _ = mlx::synchronize();
    if let Err(e) = r {
        // A rank's error says which rank it is (several print to one terminal).
        let msg = format!("{e:#}");
        if famlx::distributed::launched() && !msg.starts_with("rank ") {
            eprintln!("famlx: error: rank {}: {msg}", famlx::distributed::rank_from_env());
        } else {
            eprintln!("famlx: error: {msg}");
        }
        std::process::exit(1);
    }
}
