//! The files a conversion carries over from a source folder besides its
//! weights (tokenizer, template, generation and processor settings, the
//! README), read and checked before any work is done and written into the
//! output at the end.
//!
//! A side file is carried over only if it is what it claims: a regular file
//! within its size bound, JSON files that parse as JSON objects, text files
//! that are UTF-8. A symlink is followed only where it stays inside the
//! source folder (or, for a Hugging Face cache snapshot, inside that repo's
//! `blobs/`): a link to a file elsewhere is skipped with a warning, so a
//! converted folder the user may upload never holds a private file.

use anyhow::{anyhow, bail, Context, Result};
use famlx_formats::input::{read_input, MAX_JSON, MAX_TEMPLATE, MAX_TEXT, MAX_TOKENIZER};
use std::path::{Path, PathBuf};

/// Files a converted folder keeps besides [`crate::checkpoint::SIDE_FILES`].
const CONVERT_EXTRAS: [&str; 2] = ["video_preprocessor_config.json", "README.md"];

/// What a side file must be, by its name.
enum Kind {
    /// A JSON object.
    Json,
    /// UTF-8 text (a template, a vocabulary list, a README).
    Text,
    /// Bytes famlx does not parse (`tokenizer.model`, a SentencePiece protobuf).
    Opaque,
}

fn kind_of(name: &str) -> (Kind, u64) {
    match name {
        "tokenizer.json" => (Kind::Json, MAX_TOKENIZER),
        "tokenizer.model" => (Kind::Opaque, MAX_TOKENIZER),
        // vocab.json is a large object too (a BPE vocabulary).
        "vocab.json" => (Kind::Json, MAX_TOKENIZER),
        "merges.txt" => (Kind::Text, MAX_TOKENIZER),
        "chat_template.jinja" => (Kind::Text, MAX_TEMPLATE),
        n if n.ends_with(".json") => (Kind::Json, MAX_JSON),
        _ => (Kind::Text, MAX_TEXT),
    }
}

/// The side files of a source folder, held in memory until they are written.
pub struct SideFiles(Vec<(&'static str, Vec<u8>)>);

impl SideFiles {
    /// Reads and checks the side files of `src`. A bad side file is an
    /// error naming it; a link out of the folder is a warning, and the file
    /// is left behind.
    pub fn read(src: &Path) -> Result<SideFiles> {
        let roots = allowed_roots(src)?;
        let mut files = Vec::new();
        for name in crate::checkpoint::SIDE_FILES.iter().chain(&CONVERT_EXTRAS) {
            let from = src.join(name);
            let Ok(meta) = std::fs::symlink_metadata(&from) else { continue };
            if meta.file_type().is_symlink() {
                match std::fs::canonicalize(&from) {
                    Ok(target) if roots.iter().any(|r| target.starts_with(r)) => {}
                    Ok(target) => {
                        eprintln!(
                            "famlx: warning: {}: a link to {}, outside the source folder; not copied",
                            from.display(),
                            target.display()
                        );
                        continue;
                    }
                    Err(e) => bail!("{}: a link that cannot be followed ({e})", from.display()),
                }
            }
            let (kind, max) = kind_of(name);
            let bytes = read_input(&from, &format!("a {name}"), max)
                .with_context(|| format!("{}: cannot read", from.display()))?;
            match kind {
                Kind::Json => match serde_json::from_slice::<serde_json::Value>(&bytes) {
                    Ok(v) if v.is_object() => {}
                    Ok(_) => bail!("{}: not a JSON object; a conversion copies only valid side files", from.display()),
                    Err(e) => {
                        bail!("{}: not valid JSON ({e}); a conversion copies only valid side files", from.display())
                    }
                },
                Kind::Text => {
                    std::str::from_utf8(&bytes).map_err(|e| anyhow!("{}: not UTF-8 text ({e})", from.display()))?;
                }
                Kind::Opaque => {}
            }
            files.push((*name, bytes));
        }
        Ok(SideFiles(files))
    }

    /// Writes the files into `dst`.
    pub fn write(&self, dst: &Path) -> Result<()> {
        for (name, bytes) in &self.0 {
            let to = dst.join(name);
            std::fs::write(&to, bytes).with_context(|| format!("writing {}", to.display()))?;
        }
        Ok(())
    }
}

/// Where a side file's link may lead: the source folder, and for a folder
/// of the Hugging Face cache (`models--org--name/snapshots/REV`, whose files
/// are links into `models--org--name/blobs`) that repo's blobs.
fn allowed_roots(src: &Path) -> Result<Vec<PathBuf>> {
    let root = std::fs::canonicalize(src).with_context(|| format!("{}: cannot resolve", src.display()))?;
    let mut roots = vec![root.clone()];
    let snapshots = root.parent();
    let repo = snapshots.and_then(Path::parent);
    if let (Some(s), Some(r)) = (snapshots, repo) {
        let is_repo = r.file_name().is_some_and(|n| n.to_string_lossy().starts_with("models--"));
        if s.file_name().is_some_and(|n| n == "snapshots") && is_repo {
            roots.push(r.join("blobs"));
        }
    }
    Ok(roots)
}
