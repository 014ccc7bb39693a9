//! What the loaded families serve, as data: `famlx plugins --json` and the
//! README's "Supported models" table (`famlx plugins --table`), both made
//! from each family's [`plugin_api::ModelInfo`]s so they cannot drift from
//! the code (a test compares the README with [`markdown`]).

use super::Registry;
use plugin_api::ModelInfo;
use serde_json::{json, Value};
use std::path::PathBuf;

/// A model type's features, as the table and the JSON name them.
fn features(i: &ModelInfo) -> Vec<&'static str> {
    let mut f = vec!["text"];
    if i.gguf.is_some() {
        f.push("gguf");
    }
    for (on, name) in [(i.moe, "moe"), (i.sliding, "sliding"), (i.images, "images"), (i.audio, "audio")] {
        if on {
            f.push(name);
        }
    }
    f
}

/// Every loaded plugin, its families and their model types, the refused
/// files and the warnings, as JSON.
pub fn json(reg: &Registry, dirs: &[PathBuf]) -> Value {
    let plugins: Vec<Value> = reg
        .plugins
        .iter()
        .map(|p| {
            let families: Vec<Value> = p
                .families
                .iter()
                .map(|f| {
                    let types: Vec<Value> = f
                        .catalog
                        .iter()
                        .map(|i| {
                            json!({
                                "model_type": i.model_type.as_str(),
                                "examples": i.examples.iter().map(|e| e.as_str()).collect::<Vec<_>>(),
                                "features": features(i),
                                "gguf_architecture": i.gguf.as_ref().map(|g| g.as_str()).into_option(),
                            })
                        })
                        .collect();
                    json!({"name": f.name, "model_types": types})
                })
                .collect();
            json!({"name": p.name, "path": p.path.display().to_string(), "families": families})
        })
        .collect();
    json!({
        "abi_version": plugin_api::ABI_VERSION,
        "search_directories": dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>(),
        "plugins": plugins,
        "refused": reg.refused.iter().map(|r| json!({"path": r.path.display().to_string(), "reason": r.reason})).collect::<Vec<_>>(),
        "warnings": reg.warnings,
    })
}

/// The supported-models table: one row per model type (sorted), its
/// family, example checkpoints and what works.
pub fn markdown(reg: &Registry) -> String {
    let mut rows: Vec<(String, String)> = Vec::new();
    for f in reg.families() {
        for i in &f.catalog {
            // A GGUF architecture the family claims only as another row's
            // GGUF name (e.g. `qwen3moe` for `qwen3_moe`) is said in that row.
            let alias = i.examples.is_empty()
                && f.catalog.iter().any(|o| {
                    o.model_type != i.model_type
                        && o.gguf.as_ref().map(|g| g.as_str()).into_option() == Some(&*i.model_type)
                });
            if alias {
                continue;
            }
            let tick = |on: bool| if on { "✓" } else { "" };
            let examples: Vec<String> = i.examples.iter().map(|e| format!("`{e}`")).collect();
            let gguf = i.gguf.as_ref().map(|g| format!("✓ (`{g}`)")).into_option().unwrap_or_default();
            let row = format!(
                "| `{}` | {} | {} | ✓ | {} | {} | {} | {} | {} |",
                i.model_type,
                f.name,
                examples.join(", "),
                gguf,
                tick(i.moe),
                tick(i.sliding),
                tick(i.images),
                tick(i.audio)
            );
            rows.push((i.model_type.to_string(), row));
        }
    }
    rows.sort();
    let mut out = String::from(
        "| model_type | family | example checkpoints | text | GGUF | MoE | sliding window | images | audio |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for (_, r) in rows {
        out.push_str(&r);
        out.push('\n');
    }
    out
}
