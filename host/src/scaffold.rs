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

/// Rust's keywords (strict, reserved and weak ones, 2021 edition and
/// later): no family name, nor the type name made from it, may be one.
const KEYWORDS: [&str; 54] = [
    "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum", "extern", "false", "fn",
    "for", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub", "ref", "return", "self", "Self",
    "static", "struct", "super", "trait", "true", "type", "unsafe", "use", "where", "while", "abstract", "become",
    "box", "do", "final", "macro", "override", "priv", "typeof", "unsized", "virtual", "yield", "try", "gen", "union",
    "raw",
];

/// The type names Rust's prelude brings into every module: a family type
/// of one of these names would shadow what the template's code (or the
/// code its macros write) refers to.
const PRELUDE: [&str; 37] = [
    "Copy",
    "Send",
    "Sized",
    "Sync",
    "Unpin",
    "Drop",
    "Fn",
    "FnMut",
    "FnOnce",
    "AsMut",
    "AsRef",
    "From",
    "Into",
    "DoubleEndedIterator",
    "ExactSizeIterator",
    "Extend",
    "IntoIterator",
    "Iterator",
    "Option",
    "Some",
    "None",
    "Result",
    "Ok",
    "Err",
    "Default",
    "Eq",
    "Ord",
    "PartialEq",
    "PartialOrd",
    "ToOwned",
    "ToString",
    "TryFrom",
    "TryInto",
    "FromIterator",
    "String",
    "Vec",
    "Box",
];

/// A family name usable as a crate, library and `model_type` name, whose
/// type name (`MyFamily` for `my_family`) the template's code can take: lowercase ASCII
/// letters, digits and `_`, starting with a letter; not a Rust keyword; a
/// type name that is no keyword and no name the code already uses (the
/// prelude's, or one the template imports or defines: `array` would make a
/// second `Array`, `model_plan` a second `ModelPlan`).
pub fn check_name(name: &str) -> Result<()> {
    let ok = name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !ok {
        bail!("plugin name `{name}`: use lowercase letters, digits and `_`, starting with a letter (e.g. `phi3`)");
    }
    if KEYWORDS.contains(&name) {
        bail!("plugin name `{name}`: a Rust keyword; pick another name (e.g. `{name}_lm`)");
    }
    let ty = camel(name);
    let why = if KEYWORDS.contains(&ty.as_str()) {
        "a Rust keyword"
    } else if PRELUDE.contains(&ty.as_str()) {
        "a name of Rust's prelude"
    } else if ty != TEMPLATE_TYPE && template_names().any(|n| n == ty) {
        "a name the plugin's code already uses"
    } else {
        return Ok(());
    };
    bail!("plugin name `{name}`: its type would be named `{ty}`, {why}; pick another name (e.g. `{name}_lm`)")
}

/// The family's type name and name in the template.
const TEMPLATE_TYPE: &str = "MyTiny";
const TEMPLATE_NAME: &str = "mytiny";

/// Every identifier in the template's code (comments apart), read from the
/// template itself so the check follows it when it changes.
fn template_names() -> impl Iterator<Item = &'static str> {
    let lib = TEMPLATE.iter().find(|(rel, _)| *rel == "src/lib.rs").map_or("", |(_, text)| text);
    lib.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .flat_map(|l| l.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')))
        .filter(|w| !w.is_empty())
}

/// `text` with the template's family names replaced by `ty` and `name`, in
/// one pass (replacing one after the other would rewrite a name that
/// contains the other placeholder).
fn instantiate(text: &str, ty: &str, name: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix(TEMPLATE_TYPE) {
            out += ty;
            rest = r;
        } else if let Some(r) = rest.strip_prefix(TEMPLATE_NAME) {
            out += name;
            rest = r;
        } else {
            let c = rest.chars().next().unwrap_or_default();
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
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
        let text = instantiate(text, &type_name, name);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_replaced_in_one_pass() {
        let t = "pub struct MyTiny; fn name() { \"mytiny\" } // MyTinymytiny";
        assert_eq!(
            instantiate(t, "Amytiny", "amytiny"),
            "pub struct Amytiny; fn name() { \"amytiny\" } // Amytinyamytiny"
        );
        // The template names its type and family as this module expects.
        assert!(template_names().any(|n| n == TEMPLATE_TYPE) && template_names().any(|n| n == "ModelPlan"));
        assert!(check_name(TEMPLATE_NAME).is_ok() && check_name("my_tiny").is_ok());
    }
}
