//! `famlx plugins`: what was found, loaded and refused; `famlx plugin new`:
//! a new out-of-tree family.

use super::args::{NewPluginArgs, PluginArgs};
use crate::plugins::{plugin_search_path, Registry};
use anyhow::Result;

/// Runs `famlx plugins`.
pub(crate) fn run(a: PluginArgs) -> Result<()> {
    let dirs = plugin_search_path(&a.plugin_dirs)?;
    if a.json || a.table {
        let reg = Registry::discover(&dirs);
        if a.json {
            println!("{}", serde_json::to_string_pretty(&crate::plugins::catalog::json(&reg, &dirs))?);
        } else {
            print!("{}", crate::plugins::catalog::markdown(&reg));
        }
        return Ok(());
    }
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

/// Runs `famlx plugin new`.
pub(crate) fn new(a: NewPluginArgs) -> Result<()> {
    crate::scaffold::check_name(&a.name)?;
    let dir = a.dir.unwrap_or_else(|| format!("famlx-plugin-{}", a.name).into());
    let files = crate::scaffold::new_plugin(&a.name, &dir)?;
    let d = dir.display();
    println!(
        "wrote {} files for family `{}` (model_type \"{}\", SDK {}) to {d}",
        files.len(),
        a.name,
        a.name,
        plugin_api::SDK_VERSION
    );
    println!("next:");
    println!("  cd {d} && cargo build --release");
    println!("  famlx plugins --plugin-dir {d}/target/release");
    println!("  famlx generate --plugin-dir {d}/target/release --model CHECKPOINT --prompt \"Hello\"");
    Ok(())
}
