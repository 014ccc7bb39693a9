//! `famlx plugin new`: a buildable out-of-tree family plugin, from the
//! template (`examples/family-template`) with the plugin SDK vendored beside
//! it (`sdk/`: `famlx-plugin-api` and the `famlx-mlx` and `mlx-sys` crates it
//! builds on, as this famlx was built with). The new plugin depends on the
//! SDK by version, as on any crate; the vendored copy is where that version
//! comes from, so it builds without this repository and matches the ABI of
//! the famlx that made it.

use anyhow::{bail, Context, Result};
use include_dir::{include_dir, Dir};
use std::path::{Path, PathBuf};

/// The template's files: path in the new plugin, text (the family is called
/// `mytiny` / `MyTiny` in it).
const TEMPLATE: [(&str, &str); 4] = [
    ("Cargo.toml", include_str!("../../examples/family-template/Cargo.toml")),
    ("src/lib.rs", include_str!("../../examples/family-template/src/lib.rs")),
    ("README.md", include_str!("../../examples/family-template/README.md")),
    (".gitignore", include_str!("../../examples/family-template/.gitignore")),
];

/// The SDK crates, by folder name under `sdk/` (their manifests refer to
/// each other as `../<folder>`).
static SDK: [(&str, Dir<'static>); 3] = [
    ("plugin-api", include_dir!("$CARGO_MANIFEST_DIR/../plugin-api")),
    ("mlx", include_dir!("$CARGO_MANIFEST_DIR/../mlx")),
    ("mlx-sys", include_dir!("$CARGO_MANIFEST_DIR/../mlx-sys")),
];

/// A family name usable as a crate, library and `model_type` name:
/// lowercase ASCII letters, digits and `_`, starting with a letter.
pub fn check_name(name: &str) -> Result<()> {
    let ok = name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !ok {
        bail!("plugin name `{name}`: use lowercase letters, digits and `_`, starting with a letter (e.g. `phi3`)");
    }
    Ok(())
}

/// `my_family` → `MyFamily` (the family's type name).
fn camel(name: &str) -> String {
    name.split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next().map(|f| f.to_ascii_uppercase().to_string() + c.as_str()).unwrap_or_default()
        })
        .collect()
}

/// Writes a new plugin for family `name` into `dir` (which must not exist,
/// or be empty). Returns the files written.
pub fn new_plugin(name: &str, dir: &Path) -> Result<Vec<PathBuf>> {
    check_name(name)?;
    if dir.exists() {
        let empty = dir.is_dir() && std::fs::read_dir(dir).map(|mut d| d.next().is_none()).unwrap_or(false);
        if !empty {
            bail!("{}: already exists and is not an empty folder", dir.display());
        }
    }
    let mut written = Vec::new();
    let mut write = |rel: &Path, bytes: &[u8]| -> Result<()> {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("{}", parent.display()))?;
        }
        std::fs::write(&path, bytes).with_context(|| format!("{}", path.display()))?;
        written.push(path);
        Ok(())
    };
    let type_name = camel(name);
    for (rel, text) in TEMPLATE {
        let text = text.replace("MyTiny", &type_name).replace("mytiny", name);
        write(Path::new(rel), text.as_bytes())?;
    }
    for (folder, tree) in &SDK {
        for file in files(tree) {
            // Build outputs never belong in the copy.
            if file.path().components().any(|c| c.as_os_str() == "target") {
                continue;
            }
            write(&Path::new("sdk").join(folder).join(file.path()), file.contents())?;
        }
    }
    Ok(written)
}

/// Every file under `dir`, recursively.
fn files<'a>(dir: &'a Dir<'a>) -> Vec<&'a include_dir::File<'a>> {
    let mut out: Vec<_> = dir.files().collect();
    for d in dir.dirs() {
        out.extend(files(d));
    }
    out
}
