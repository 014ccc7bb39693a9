//! `famlx plugins`: what was found, loaded and refused.

use super::args::PluginArgs;
use crate::plugins::{search_dirs, Registry};
use anyhow::Result;

/// Runs `famlx plugins`.
pub(crate) fn run(a: PluginArgs) -> Result<()> {
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
