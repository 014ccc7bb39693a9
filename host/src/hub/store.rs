//! The Hugging Face cache on disk (`models--org--name/{blobs, snapshots,
//! refs}`, `.locks/`), laid out as Python's `huggingface_hub` lays it out so
//! either tool uses what the other fetched. Every path here is the cache
//! folder joined with a path `famlx_formats::hub` built from checked parts.

use anyhow::{anyhow, bail, Context, Result};
use famlx_formats::hub as check;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// The largest `refs/` file read (a commit hash is 40 bytes).
const MAX_REF: u64 = 4096;
/// The largest token file read.
const MAX_TOKEN: u64 = 64 << 10;
/// The largest index read from a snapshot.
pub const MAX_INDEX: u64 = 64 << 20;
/// How deep [`gguf_files`] walks a snapshot (GGUF repos keep quants in
/// folders one or two deep).
const MAX_DEPTH: usize = 8;
/// How many entries [`gguf_files`] looks at.
const MAX_FILES: usize = 100_000;

/// The cache folder (`HF_HUB_CACHE`, else `$HF_HOME/hub`).
pub struct Store {
    /// The folder.
    pub root: PathBuf,
}

/// `HF_HOME`, else `$XDG_CACHE_HOME/huggingface`, else `~/.cache/huggingface`
/// (Python's order).
fn hf_home() -> Result<PathBuf> {
    if let Some(h) = std::env::var_os("HF_HOME").filter(|h| !h.is_empty()) {
        return Ok(PathBuf::from(h));
    }
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME").filter(|h| !h.is_empty()) {
        return Ok(PathBuf::from(x).join("huggingface"));
    }
    let home =
        dirs::home_dir().ok_or_else(|| anyhow!("no home folder to put the Hugging Face cache in: set HF_HOME"))?;
    Ok(home.join(".cache").join("huggingface"))
}

impl Store {
    /// The cache the environment names.
    pub fn from_env() -> Result<Store> {
        let root = match std::env::var_os("HF_HUB_CACHE").filter(|h| !h.is_empty()) {
            Some(p) => PathBuf::from(p),
            None => hf_home()?.join("hub"),
        };
        Ok(Store { root })
    }

    /// The snapshot folder of `repo` at `revision` if the cache holds a
    /// complete checkpoint there: config.json and the weights (every shard
    /// the index names, or at least one `.safetensors` file).
    pub fn cached_snapshot(&self, repo: &str, revision: &str) -> Option<PathBuf> {
        let dir = self.snapshot(repo, revision)?;
        if !dir.join("config.json").is_file() {
            return None;
        }
        match read_small(&dir.join("model.safetensors.index.json"), MAX_INDEX) {
            Ok(index) => {
                let shards = famlx_formats::safetensors::index_shards(&index).ok()?;
                shards.iter().all(|s| check::repo_file(s).is_ok() && dir.join(s).is_file()).then_some(dir)
            }
            Err(_) => {
                let has = std::fs::read_dir(&dir)
                    .ok()?
                    .flatten()
                    .any(|e| e.file_name().to_string_lossy().ends_with(".safetensors") && e.path().is_file());
                has.then_some(dir)
            }
        }
    }

    /// The snapshot folder of `repo` at `revision` (a commit, or what its
    /// `refs/` file names), if the cache has it.
    pub fn snapshot(&self, repo: &str, revision: &str) -> Option<PathBuf> {
        let commit = if check::is_commit(revision) {
            revision.to_string()
        } else {
            let r = read_small(&self.root.join(check::ref_path(repo, revision).ok()?), MAX_REF).ok()?;
            check::commit(String::from_utf8(r).ok()?.trim()).ok()?.to_string()
        };
        Some(self.root.join(check::snapshot_dir(repo, &commit).ok()?)).filter(|d| d.is_dir())
    }

    /// Records that `revision` of `repo` is at `commit` (`refs/<revision>`),
    /// replacing the file in one rename so a reader never sees half of it.
    /// A revision that is the commit itself needs no ref.
    pub fn write_ref(&self, repo: &str, revision: &str, commit: &str) -> Result<()> {
        if revision == commit {
            return Ok(());
        }
        let path = self.root.join(check::ref_path(repo, revision)?);
        if read_small(&path, MAX_REF).is_ok_and(|r| r.trim_ascii() == commit.as_bytes()) {
            return Ok(());
        }
        let dir = path.parent().expect("a ref path has a folder");
        std::fs::create_dir_all(dir).with_context(|| dir.display().to_string())?;
        let name = path.file_name().expect("a ref path names a file").to_string_lossy();
        let tmp = dir.join(format!(".{name}.famlx-{}", std::process::id()));
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(commit.as_bytes())?;
            std::fs::rename(&tmp, &path)
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            anyhow!("{}: {e}", path.display())
        })
    }

    /// Makes `pointer` (in a snapshot) a relative symlink to its blob, as
    /// Python's cache does; a stale link there is replaced. Where symlinks
    /// are not available the blob is copied.
    pub fn link(&self, paths: &check::FilePaths) -> Result<PathBuf> {
        let pointer = self.root.join(&paths.pointer);
        let dir = pointer.parent().expect("a pointer has a folder");
        std::fs::create_dir_all(dir).with_context(|| dir.display().to_string())?;
        if pointer.symlink_metadata().is_ok_and(|m| m.file_type().is_symlink()) {
            std::fs::remove_file(&pointer).with_context(|| pointer.display().to_string())?;
        }
        #[cfg(unix)]
        let made = std::os::unix::fs::symlink(&paths.link, &pointer);
        #[cfg(not(unix))]
        let made = std::fs::copy(self.root.join(&paths.blob), &pointer).map(|_| ());
        match made {
            Ok(()) => Ok(pointer),
            // Another process linked it first.
            Err(_) if pointer.is_file() => Ok(pointer),
            Err(e) => Err(anyhow!("{}: {e}", pointer.display())),
        }
    }

    /// Takes the download lock of a blob (`.locks/…/<etag>.lock`, the file
    /// Python's `huggingface_hub` locks), waiting while another process
    /// downloads the same blob.
    pub fn lock(&self, rel: &Path, what: &str) -> Result<Lock> {
        let path = self.root.join(rel);
        let dir = path.parent().expect("a lock path has a folder");
        std::fs::create_dir_all(dir).with_context(|| dir.display().to_string())?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| path.display().to_string())?;
        let mut told = false;
        while !try_lock(&file) {
            if !told {
                eprintln!("famlx: waiting for another download of {what} ({})", path.display());
                told = true;
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        Ok(Lock { _file: file })
    }
}

/// A held download lock, released when dropped (or when the process ends).
pub struct Lock {
    _file: std::fs::File,
}

#[cfg(unix)]
fn try_lock(f: &std::fs::File) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor this File owns; it is released when the
    // File is closed.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

#[cfg(not(unix))]
fn try_lock(_: &std::fs::File) -> bool {
    true
}

/// The `.gguf` files of a snapshot folder whose blobs are there (a link
/// to a blob still downloading is not a file yet), as `/`-separated paths
/// relative to it. Folders are walked to [`MAX_DEPTH`] levels, never through
/// a link, and at most [`MAX_FILES`] entries are looked at.
pub fn gguf_files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![(dir.to_path_buf(), String::new(), 0)];
    let mut seen = 0;
    while let Some((d, rel, depth)) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            seen += 1;
            if seen > MAX_FILES {
                return out;
            }
            let Some(name) = e.file_name().to_str().map(str::to_string) else { continue };
            let path = if rel.is_empty() { name.clone() } else { format!("{rel}/{name}") };
            let Ok(t) = e.file_type() else { continue };
            if t.is_dir() && depth < MAX_DEPTH {
                todo.push((e.path(), path, depth + 1));
            } else if name.to_ascii_lowercase().ends_with(".gguf") && e.path().is_file() {
                out.push(path);
            }
        }
    }
    out
}

/// The bytes free to this user on the file system holding `dir`, if known.
pub fn free_space(dir: &Path) -> Option<u64> {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: `c` is a NUL-terminated path and `s` a statvfs to fill.
        if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
            return None;
        }
        #[allow(clippy::unnecessary_cast)] // the field types differ between platforms
        Some((s.f_bavail as u64).saturating_mul(s.f_frsize as u64))
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        None
    }
}

/// A regular file of at most `limit` bytes (a FIFO or device is refused
/// before it is opened, so nothing blocks or grows without bound).
pub fn read_small(path: &Path, limit: u64) -> Result<Vec<u8>> {
    let m = std::fs::metadata(path).with_context(|| path.display().to_string())?;
    if !m.is_file() {
        bail!("{}: not a regular file", path.display());
    }
    if m.len() > limit {
        bail!("{}: larger than {limit} bytes", path.display());
    }
    let mut b = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(limit + 1).read_to_end(&mut b))
        .with_context(|| path.display().to_string())?;
    if b.len() as u64 > limit {
        bail!("{}: larger than {limit} bytes", path.display());
    }
    Ok(b)
}

/// The token to send: `HF_TOKEN`, else the file `huggingface-cli login`
/// writes (`HF_TOKEN_PATH`, else `$HF_HOME/token`).
pub fn token() -> Result<Option<String>> {
    // A header value cannot hold a line break or other control character.
    let usable = |t: &str| !t.is_empty() && !t.chars().any(|c| c.is_control());
    if let Ok(t) = std::env::var("HF_TOKEN") {
        let t = t.trim();
        if !t.is_empty() {
            if !usable(t) {
                bail!("HF_TOKEN holds a control character (a line break?): it cannot be sent");
            }
            return Ok(Some(t.to_string()));
        }
    }
    let path = match std::env::var_os("HF_TOKEN_PATH").filter(|p| !p.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => hf_home()?.join("token"),
    };
    let Ok(t) = read_small(&path, MAX_TOKEN) else { return Ok(None) };
    let t = String::from_utf8_lossy(&t).trim().to_string();
    Ok(Some(t).filter(|t| usable(t)))
}
