//! The `famlx` binary.

use clap::Parser;

fn main() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("FAMLX_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    let cli = famlx::cli::Cli::parse();
    if let Err(e) = famlx::cli::run(cli) {
        eprintln!("famlx: error: {e:#}");
        std::process::exit(1);
    }
}
