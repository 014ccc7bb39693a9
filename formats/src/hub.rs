//! What a Hugging Face hub server says, checked before any of it becomes a
//! path in the cache.
//!
//! The cache layout (`models--org--name/{blobs/<etag>, snapshots/<commit>/<file>,
//! refs/<revision>}`, shared with Python's `huggingface_hub`) builds paths
//! from a repo id and a revision the user typed, and from a commit, an ETag
//! and file names the server chose. Each part is checked here against what
//! the hub really uses (a commit is 40 lowercase hex digits, an ETag the hex
//! of a sha1 or sha256, a revision a git ref name, a file a relative path
//! without `..`), so that whatever a server answers, every path built from
//! it stays inside the cache folder, or is refused in one line.
//!
//! Pure functions with no I/O, so `fuzz/fuzz_targets/hub.rs` can check that
//! property on arbitrary input.

use crate::{Error, Result};
use std::path::{Component, Path, PathBuf};

/// The longest repo id the hub accepts (`huggingface_hub`'s `validate_repo_id`).
pub const MAX_REPO_ID: usize = 96;
/// The longest revision accepted (git itself has no limit; no real branch,
/// tag or PR ref comes near this).
pub const MAX_REVISION: usize = 255;
/// The longest file name (path inside a repo) accepted.
pub const MAX_FILE_NAME: usize = 1024;

/// `s` quoted for an error line: escaped (a control character or a newline
/// cannot break the line) and cut to 80 characters.
pub fn shown(s: &str) -> String {
    let cut: String = s.chars().take(80).collect();
    if cut.len() < s.len() {
        format!("{:?}...", cut)
    } else {
        format!("{cut:?}")
    }
}

/// Checks a repo id `org/name` (the rules of the hub and `huggingface_hub`:
/// letters, digits, `-`, `_`, `.`; no part empty, starting or ending with
/// `-` or `.`, or holding `--` or `..`; at most 96 characters) and returns
/// its cache folder name, `models--org--name`.
pub fn repo_folder(repo_id: &str) -> Result<String> {
    let part_ok = |p: &str| {
        !p.is_empty()
            && !p.starts_with(['.', '-'])
            && !p.ends_with(['.', '-'])
            && !p.contains("--")
            && !p.contains("..")
            && p.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    match repo_id.split_once('/') {
        Some((org, name)) if repo_id.len() <= MAX_REPO_ID && part_ok(org) && part_ok(name) => {
            Ok(format!("models--{org}--{name}"))
        }
        _ => Err(Error::new(format!(
            "{} is not a hub repo id (org/name: letters, digits, '-', '_', '.'; at most {MAX_REPO_ID} characters)",
            shown(repo_id)
        ))),
    }
}

/// Whether `s` is a full commit hash: 40 lowercase hex digits.
pub fn is_commit(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Checks a commit hash (the `X-Repo-Commit` header, the repo listing's
/// `sha`, a `refs/` file): 40 lowercase hex digits.
pub fn commit(s: &str) -> Result<&str> {
    if is_commit(s) {
        Ok(s)
    } else {
        Err(Error::new(format!("commit {} is not 40 lowercase hex digits", shown(s))))
    }
}

/// Checks an `ETag` (or `X-Linked-Etag`) header and returns the digest it
/// names, the blob's file name: a weak `W/` prefix and the quotes are
/// dropped, and what is left must be the hex of a sha1 (40 digits, a git
/// blob) or a sha256 (64 digits, an LFS object).
pub fn etag(header: &str) -> Result<&str> {
    let t = header.trim();
    let t = t.strip_prefix("W/").unwrap_or(t);
    let t = t.strip_prefix('"').and_then(|x| x.strip_suffix('"')).unwrap_or(t);
    if matches!(t.len(), 40 | 64) && t.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(t)
    } else {
        Err(Error::new(format!("ETag {} is not a sha1 or sha256 hex digest", shown(header))))
    }
}

/// Checks a size header (`Content-Length`, `X-Linked-Size`): decimal digits
/// that fit a `u64`.
pub fn size(header: &str) -> Result<u64> {
    let t = header.trim();
    match t.parse::<u64>() {
        Ok(n) if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
        _ => Err(Error::new(format!("size {} is not a byte count", shown(header)))),
    }
}

/// Checks a revision (`--revision`: a branch, tag, `refs/pr/N` or commit) by
/// git's rules for ref names (`git check-ref-format`): `/`-separated parts,
/// none empty, `.` or `..`, starting with `.` or ending with `.lock`; no
/// control characters, spaces, `~ ^ : ? * [ \`, `@{`; not `@` alone.
pub fn revision(s: &str) -> Result<&str> {
    let bad = |why: &str| Err(Error::new(format!("revision {} {why}", shown(s))));
    if s.is_empty() {
        return bad("is empty");
    }
    if s.len() > MAX_REVISION {
        return bad(&format!("is longer than {MAX_REVISION} bytes"));
    }
    if s == "@" || s.contains("@{") {
        return bad("is not a ref name (`@`, `@{`)");
    }
    if let Some(c) = s.chars().find(|&c| c.is_control() || " ~^:?*[\\".contains(c)) {
        return bad(&format!("holds {c:?}, which a ref name cannot"));
    }
    for part in s.split('/') {
        if part.is_empty() {
            return bad("has an empty part (a leading, trailing or doubled `/`)");
        }
        if part.starts_with('.') || part.ends_with(".lock") {
            return bad(&format!("has a part {} (a ref part cannot start with `.` or end with `.lock`)", shown(part)));
        }
    }
    if s.ends_with('.') {
        return bad("ends with `.`");
    }
    Ok(s)
}

/// Checks the name of a file in a repo (the repo listing, an index's shard
/// names): a relative `/`-separated path, no part empty, `.` or `..`, no
/// backslash or control character, at most 1024 bytes.
pub fn repo_file(s: &str) -> Result<&str> {
    let bad = |why: &str| Err(Error::new(format!("file name {} {why}", shown(s))));
    if s.is_empty() {
        return bad("is empty");
    }
    if s.len() > MAX_FILE_NAME {
        return bad(&format!("is longer than {MAX_FILE_NAME} bytes"));
    }
    if let Some(c) = s.chars().find(|&c| c.is_control() || c == '\\') {
        return bad(&format!("holds {c:?}"));
    }
    if s.split('/').any(|p| p.is_empty() || p == "." || p == "..") {
        return bad("is not a plain relative path (an empty, `.` or `..` part, or a leading `/`)");
    }
    Ok(s)
}

/// Where one file of a repo lives in the cache; every path is relative to
/// the cache folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilePaths {
    /// `models--org--name/blobs/<etag>`: the bytes.
    pub blob: PathBuf,
    /// `models--org--name/blobs/<etag>.incomplete`: a download under way
    /// (Python's name too, so either tool resumes the other's).
    pub incomplete: PathBuf,
    /// `.locks/models--org--name/<etag>.lock`: held while downloading (the
    /// file `huggingface_hub` locks too).
    pub lock: PathBuf,
    /// `models--org--name/snapshots/<commit>/<file>`: the link to the blob.
    pub pointer: PathBuf,
    /// What the pointer links to, relative to the pointer's folder
    /// (`../../blobs/<etag>`, one more `..` per folder in the file's name).
    pub link: PathBuf,
}

/// The cache paths of `file` of `repo_id` at `commit`, with the blob named
/// by `etag` (a raw header: checked and unquoted here). Every part is
/// checked first; whatever the inputs, every path returned stays inside the
/// cache folder (see [`stays_inside`]).
pub fn file_paths(repo_id: &str, commit_hash: &str, etag_header: &str, file: &str) -> Result<FilePaths> {
    let folder = repo_folder(repo_id)?;
    let commit_hash = commit(commit_hash)?;
    let tag = etag(etag_header)?;
    let file = repo_file(file)?;
    let repo = Path::new(&folder);
    let mut link = PathBuf::new();
    // From snapshots/<commit>/<dirs of file>/ up to the repo folder.
    for _ in 0..file.split('/').count() + 1 {
        link.push("..");
    }
    link.push("blobs");
    link.push(tag);
    Ok(FilePaths {
        blob: repo.join("blobs").join(tag),
        incomplete: repo.join("blobs").join(format!("{tag}.incomplete")),
        lock: Path::new(".locks").join(&folder).join(format!("{tag}.lock")),
        pointer: repo.join("snapshots").join(commit_hash).join(file),
        link,
    })
}

/// `models--org--name/snapshots/<commit>`, relative to the cache folder.
pub fn snapshot_dir(repo_id: &str, commit_hash: &str) -> Result<PathBuf> {
    Ok(Path::new(&repo_folder(repo_id)?).join("snapshots").join(commit(commit_hash)?))
}

/// `models--org--name/refs/<revision>`, relative to the cache folder (a
/// revision like `refs/pr/1` makes folders, as in Python's cache).
pub fn ref_path(repo_id: &str, rev: &str) -> Result<PathBuf> {
    Ok(Path::new(&repo_folder(repo_id)?).join("refs").join(revision(rev)?))
}

/// Whether `p` is relative and made only of plain names (no root, prefix,
/// `.` or `..`): joined to a folder it can only name something inside it.
pub fn stays_inside(p: &Path) -> bool {
    p.components().next().is_some() && p.components().all(|c| matches!(c, Component::Normal(_)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

    #[test]
    fn hostile_parts_are_refused() {
        for e in ["/abs/PWNED", "../../../../PWNED", "\"../x\"", "", "W/\"\"", "abc", &"a".repeat(41)] {
            assert!(etag(e).is_err(), "{e}");
        }
        assert_eq!(etag(&format!("W/\"{SHA}\"")).unwrap(), SHA);
        assert_eq!(etag(&"F".repeat(64)).unwrap(), "F".repeat(64));
        for c in ["/abs", "../0123456789abcdef0123456789abcdef012345", &SHA.to_uppercase(), "main"] {
            assert!(commit(c).is_err(), "{c}");
        }
        for r in
            ["../../x", "/abs", "a//b", "a/", ".hidden", "a/..", "x.lock", "a\\b", "a\0b", "a b", "@", "a@{1}", "a."]
        {
            assert!(revision(r).is_err(), "{r}");
        }
        for r in ["main", "refs/pr/1", "v1.0", SHA, "feature/x-y_z"] {
            assert_eq!(revision(r).unwrap(), r);
        }
        for f in ["/etc/passwd", "../x", "a/../b", "a//b", "./a", "a\\b", "a/", "\u{1b}[2J"] {
            assert!(repo_file(f).is_err(), "{f}");
        }
        for id in ["a/b/c", "../x", "a--b/c", "-a/b", "a/b.", "a/..b", "a/b c"] {
            assert!(repo_folder(id).is_err(), "{id}");
        }
        assert_eq!(repo_folder("mlx-community/Qwen3-0.6B-4bit").unwrap(), "models--mlx-community--Qwen3-0.6B-4bit");
        assert!(size("-1").is_err() && size("+5").is_err() && size("99999999999999999999").is_err());
        assert_eq!(size(" 725 ").unwrap(), 725);
    }

    #[test]
    fn a_file_links_to_its_blob() {
        let p = file_paths("o/n", SHA, &format!("\"{}\"", "ab".repeat(32)), "sub/dir/f.json").unwrap();
        assert_eq!(p.pointer, Path::new("models--o--n/snapshots").join(SHA).join("sub/dir/f.json"));
        assert_eq!(p.link, Path::new("../../../../blobs").join("ab".repeat(32)));
        for q in [&p.blob, &p.incomplete, &p.lock, &p.pointer] {
            assert!(stays_inside(q), "{}", q.display());
        }
    }

    #[test]
    fn error_lines_stay_one_line() {
        let e = revision("a\nb").unwrap_err().to_string();
        assert!(!e.contains('\n'), "{e}");
        let e = etag(&"x\r\n".repeat(100)).unwrap_err().to_string();
        assert!(!e.contains('\n') && e.len() < 250, "{e}");
    }
}
