//! `--model org/name`: checkpoints from the Hugging Face hub into the
//! standard Hugging Face cache (`HF_HUB_CACHE`, `HF_HOME`), so a cache
//! filled by Python's `huggingface_hub` serves famlx and the reverse. Only
//! the files a checkpoint needs are fetched (config, the weights the index
//! names, tokenizer and processor files), or for a GGUF repo
//! (`org/NAME-GGUF[:Q4_K_M]`, see [`gguf`]) the one model file the tag
//! picks, with its split parts; `HF_ENDPOINT`, `HF_TOKEN` and
//! `HF_HUB_OFFLINE` are honoured, a partial download resumes, and with the
//! network down a complete cached snapshot is used.
//!
//! Nothing a server says becomes a path unchecked: the commit, each ETag,
//! each file name and the user's `--revision` go through
//! `famlx_formats::hub` (fuzzed) first. Each request has connect and read
//! timeouts (`FAMLX_HUB_TIMEOUT_SECS`), a redirect cap, and each body is
//! counted against the size announced for it.
//!
//! Why not the `hf-hub` crate (used before): 0.4.3 joins the `ETag` and
//! `X-Repo-Commit` headers into cache paths as they come (an ETag of
//! `../../x` writes there; a `../` commit panics), follows relative redirects
//! without end, sets no timeout and writes whatever length a body has. Its
//! `get`/`download` do the request and the write in one call, so there is
//! no point between "headers read" and "path built" where a caller could
//! check them: it cannot be made safe from outside. What famlx used of it
//! is small (a listing, a `HEAD`, a ranged `GET`, the cache layout), so this
//! module does it on `ureq`, the client hf-hub itself used.

pub mod gguf;
mod http;
mod store;

use anyhow::{anyhow, bail, Context, Result};
use famlx_formats::hub as check;
use http::{Client, Failure, Meta};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;
use store::Store;

/// Seconds a connection, or a read or write on it, may wait, unless
/// `FAMLX_HUB_TIMEOUT_SECS` says otherwise.
pub const DEFAULT_TIMEOUT_SECS: f64 = 30.0;
/// How many more times a transfer that broke off after making progress is
/// resumed before the run fails (the next run resumes it too).
const RETRIES: u32 = 3;

/// Where `--model` points: an existing path (first: a local `a/b:c` is not
/// a repo), the embedded default, or a hub repo id, `org/name` or
/// `org/name:TAG` for a GGUF repo (downloaded on first use). Anything else
/// is an error naming it.
pub fn resolve_model(m: &str, revision: Option<&str>) -> Result<PathBuf> {
    let hub = if Path::new(m).exists() { None } else { gguf::hub_ref(m)? };
    let Some((repo, tag)) = hub else {
        if revision.is_some() {
            bail!("--revision applies to a hub repo id, and {m} is a local path");
        }
        return crate::default_model::resolve(Some(m));
    };
    fetch(repo, revision.unwrap_or("main"), tag)
}

fn offline() -> bool {
    std::env::var("HF_HUB_OFFLINE")
        .is_ok_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
}

/// The endpoint the downloads go to.
fn endpoint() -> String {
    std::env::var("HF_ENDPOINT").unwrap_or_else(|_| "https://huggingface.co".into()).trim_end_matches('/').to_string()
}

/// `FAMLX_HUB_TIMEOUT_SECS`, or the default.
fn timeout() -> Result<Duration> {
    let Ok(v) = std::env::var("FAMLX_HUB_TIMEOUT_SECS") else {
        return Ok(Duration::from_secs_f64(DEFAULT_TIMEOUT_SECS));
    };
    match v.trim().parse::<f64>() {
        Ok(s) if s > 0.0 && s <= 86_400.0 => Ok(Duration::from_secs_f64(s)),
        _ => bail!("FAMLX_HUB_TIMEOUT_SECS={}: not a number of seconds in (0, 86400]", check::shown(&v)),
    }
}

/// Downloads what `repo` at `revision` needs and returns its snapshot
/// folder, or for a GGUF repo the model file `tag` picks (see [`gguf`]).
/// The revision is checked before anything is asked or written.
pub fn fetch(repo: &str, revision: &str, tag: Option<&str>) -> Result<PathBuf> {
    check::repo_folder(repo)?;
    check::revision(revision).map_err(|e| anyhow!("{repo}: --revision: {e}"))?;
    let store = Store::from_env()?;
    if offline() {
        return cached(&store, repo, revision, tag)?.ok_or_else(|| {
            anyhow!("{repo}: not in the Hugging Face cache ({}) and HF_HUB_OFFLINE is set", store.root.display())
        });
    }
    let client = Client::new(&endpoint(), store::token()?, timeout()?);
    let listing = match client.listing(repo, revision) {
        Ok(l) => l,
        Err(e) => {
            let why = describe(&client, repo, revision, &e);
            // The network is down: a complete cached snapshot still serves.
            if matches!(e, Failure::Unreachable(_)) {
                if let Some(dir) = cached(&store, repo, revision, tag)? {
                    eprintln!("famlx: warning: {why}; using the cached {}", dir.display());
                    return Ok(dir);
                }
            }
            bail!("{why}");
        }
    };
    let commit = check::commit(listing.sha.trim()).map_err(|e| anyhow!("{repo}: the repo listing: {e}"))?.to_string();
    if check::is_commit(revision) && revision != commit {
        bail!("{repo}: asked for commit {revision}, the hub lists {commit}");
    }
    let listed: Vec<&str> = listing.siblings.iter().map(|s| s.rfilename.as_str()).collect();
    let get = |f: &str| fetch_file(&client, &store, repo, &commit, f);
    // A checkpoint (config.json and safetensors) unless a tag asks for a
    // GGUF file or the repo has none; then a GGUF model.
    let checkpoint = listed.contains(&"config.json")
        && listed.iter().any(|f| *f == "model.safetensors.index.json" || f.ends_with(".safetensors"));
    let models = gguf::models(listed.iter().copied());
    if tag.is_some() || (!checkpoint && !models.is_empty()) || !listed.contains(&"config.json") {
        let model = gguf::choose(repo, &models, tag)?;
        if !model.complete() {
            bail!(
                "{repo}: {} is part of a split GGUF ({} parts), and the repo lacks some of them",
                check::shown(&model.first),
                model.parts
            );
        }
        for f in &model.files {
            get(f)?;
        }
        store.write_ref(repo, revision, &commit)?;
        // Checked (by `get`) before it became a path.
        return Ok(store.root.join(check::snapshot_dir(repo, &commit)?).join(&model.first));
    }
    get("config.json")?;
    let mut weights: Vec<String> = Vec::new();
    if listed.contains(&"model.safetensors.index.json") {
        let index = store::read_small(&get("model.safetensors.index.json")?, store::MAX_INDEX)
            .map_err(|e| anyhow!("{repo}: model.safetensors.index.json: {e:#}"))?;
        weights = famlx_formats::safetensors::index_shards(&index)
            .map_err(|e| anyhow!("{repo}: model.safetensors.index.json: {e}"))?;
        for w in &weights {
            if !listed.contains(&w.as_str()) {
                bail!("{repo}: {}, named by model.safetensors.index.json, is not in the repo", check::shown(w));
            }
        }
    } else {
        weights
            .extend(listed.iter().filter(|f| f.ends_with(".safetensors") && !f.contains('/')).map(|f| f.to_string()));
        if weights.is_empty() {
            bail!("{repo}: the repo has no .safetensors weights");
        }
    }
    for f in crate::checkpoint::SIDE_FILES.iter().filter(|f| listed.contains(f)) {
        get(f)?;
    }
    for w in &weights {
        get(w)?;
    }
    store.write_ref(repo, revision, &commit)?;
    Ok(store.root.join(check::snapshot_dir(repo, &commit)?))
}

/// What the cache holds of `repo` at `revision`, for offline use: a
/// complete checkpoint's snapshot folder (unless a tag asks for a GGUF
/// file), else the GGUF model `tag` picks among the cached ones, all of its
/// parts there. Without a tag, a snapshot holding several GGUF models is an
/// error listing them; one the cache lacks is `None`.
fn cached(store: &Store, repo: &str, revision: &str, tag: Option<&str>) -> Result<Option<PathBuf>> {
    if tag.is_none() {
        if let Some(dir) = store.cached_snapshot(repo, revision) {
            return Ok(Some(dir));
        }
    }
    let Some(dir) = store.snapshot(repo, revision) else { return Ok(None) };
    let files = store::gguf_files(&dir);
    let models = gguf::models(files.iter().map(String::as_str));
    if models.is_empty() {
        return Ok(None);
    }
    let model = match (gguf::choose(repo, &models, tag), tag) {
        (Ok(m), _) => m,
        // A tag the cache lacks may still be on the hub.
        (Err(_), Some(_)) => return Ok(None),
        (Err(e), None) => return Err(e),
    };
    Ok(model.complete().then(|| dir.join(&model.first)))
}

/// `file` of `repo` at `commit` in the cache (downloaded unless its snapshot
/// already holds it): the path of its link in the snapshot folder.
fn fetch_file(client: &Client, store: &Store, repo: &str, commit: &str, file: &str) -> Result<PathBuf> {
    check::repo_file(file).map_err(|e| anyhow!("{repo}: refused a file the repo lists: {e}"))?;
    let pointer = store.root.join(check::snapshot_dir(repo, commit)?).join(file);
    if pointer.is_file() {
        return Ok(pointer);
    }
    let meta = client.head(repo, commit, file).map_err(|e| anyhow!("{}", describe_file(client, repo, file, &e)))?;
    let paths = check::file_paths(repo, commit, &meta.etag, file)?;
    let blob = store.root.join(&paths.blob);
    let whole = |b: &Path| std::fs::metadata(b).is_ok_and(|m| m.is_file() && m.len() == meta.size);
    if !whole(&blob) {
        let _lock = store.lock(&paths.lock, file)?;
        // Another process may have finished it while this one waited.
        if !whole(&blob) {
            download_blob(client, store, &paths, &meta, repo, file)?;
        }
    }
    store.link(&paths)
}

/// Downloads a blob into its `.incomplete` file (resuming what is there),
/// then renames it into place. A refused answer drops what it wrote; a
/// transfer that broke off keeps it for the next attempt or run.
fn download_blob(
    client: &Client,
    store: &Store,
    paths: &check::FilePaths,
    meta: &Meta,
    repo: &str,
    file: &str,
) -> Result<()> {
    let part = store.root.join(&paths.incomplete);
    let dir = part.parent().expect("a blob path has a folder");
    std::fs::create_dir_all(dir).with_context(|| dir.display().to_string())?;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&part)
        .with_context(|| part.display().to_string())?;
    let len = |f: &std::fs::File| f.metadata().map(|m| m.len()).with_context(|| part.display().to_string());
    if len(&f)? > meta.size {
        f.set_len(0).with_context(|| part.display().to_string())?;
    }
    let need = meta.size - len(&f)?;
    if let Some(free) = store::free_space(dir) {
        if need > free {
            bail!("{repo}: downloading {file}: it needs {need} more bytes and {} has {free} free", dir.display());
        }
    }
    let bar = progress(file, meta.size);
    let mut tries = 0;
    loop {
        let before = len(&f)?;
        match client.download(meta, &mut f, bar.as_ref()) {
            Ok(()) => break,
            Err(Failure::Cut(_) | Failure::Unreachable(_)) if tries < RETRIES && len(&f)? > before => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(500 * tries as u64));
            }
            Err(e) => {
                if let Some(b) = &bar {
                    b.abandon();
                }
                if matches!(e, Failure::Refused(_)) {
                    drop(f);
                    let _ = std::fs::remove_file(&part);
                }
                bail!("{}", describe_file(client, repo, file, &e));
            }
        }
    }
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    let got = len(&f)?;
    if got != meta.size {
        bail!("{repo}: downloading {file}: {got} bytes on disk where {} were announced", meta.size);
    }
    drop(f);
    let blob = store.root.join(&paths.blob);
    std::fs::rename(&part, &blob).with_context(|| blob.display().to_string())
}

/// A byte progress bar for `file` on a terminal.
fn progress(file: &str, size: u64) -> Option<indicatif::ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let b = indicatif::ProgressBar::new(size);
    b.set_style(
        indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    b.set_message(file.to_string());
    Some(b)
}

/// One line for a failed repo listing.
fn describe(client: &Client, repo: &str, revision: &str, e: &Failure) -> String {
    let at = client.endpoint();
    match e {
        Failure::Status(code @ (401 | 403)) => {
            format!("{repo}: access denied by {at} ({code}): set HF_TOKEN to a token that may read it")
        }
        Failure::Status(404) => format!("{repo}: no such repo or revision {revision:?} on {at} (404)"),
        Failure::Status(code) => format!("{repo}: {at} answered {code}"),
        Failure::Unreachable(why) => format!("{repo}: cannot reach {at}: {why}"),
        Failure::Cut(why) | Failure::Refused(why) | Failure::Local(why) => format!("{repo}: {at}: {why}"),
    }
}

/// One line for a failed file download.
fn describe_file(client: &Client, repo: &str, file: &str, e: &Failure) -> String {
    match e {
        Failure::Status(code) => format!("{repo}: downloading {file}: {} answered {code}", client.endpoint()),
        Failure::Unreachable(why) | Failure::Cut(why) | Failure::Refused(why) | Failure::Local(why) => {
            format!("{repo}: downloading {file}: {}", http::one_line(why))
        }
    }
}

#[cfg(test)]
mod tests {
    /// `org/name` as the hub allows it (what `--model` takes for a repo).
    fn is_repo_id(s: &str) -> bool {
        super::check::repo_folder(s).is_ok()
    }

    #[test]
    fn repo_ids() {
        assert!(is_repo_id("mlx-community/Qwen3-0.6B-4bit"));
        assert!(!is_repo_id("model.gguf"));
        assert!(!is_repo_id("./a/b"));
        assert!(!is_repo_id("/abs/path"));
        assert!(!is_repo_id("a/b/c"));
        assert!(!is_repo_id("../x"));
    }
}
