//! `--model org/name`: checkpoints from the Hugging Face hub, through the
//! `hf-hub` crate, into the standard Hugging Face cache (`HF_HOME`,
//! `HF_HUB_CACHE`), so a cache filled by Python's `huggingface_hub` serves
//! famlx and the reverse. Only the files a checkpoint needs are fetched
//! (config, the weights the index names, tokenizer and processor files);
//! `HF_ENDPOINT`, `HF_TOKEN` and `HF_HUB_OFFLINE` are honoured, a partial
//! download resumes, and with the network down a complete cached snapshot
//! is used.

use anyhow::{anyhow, bail, Result};
use hf_hub::api::sync::ApiBuilder;
use hf_hub::{Cache, Repo, RepoType};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

/// Where `--model` points: an existing path, the embedded default, or a hub
/// repo id (downloaded on first use). Anything else is an error naming it.
pub fn resolve_model(m: &str, revision: Option<&str>) -> Result<PathBuf> {
    let p = Path::new(m);
    if p.exists() || !is_repo_id(m) {
        if revision.is_some() {
            bail!("--revision applies to a hub repo id, and {m} is a local path");
        }
        return crate::default_model::resolve(Some(m));
    }
    fetch(m, revision.unwrap_or("main"))
}

/// `org/name`: two non-empty parts of letters, digits, `-`, `_`, `.`.
pub fn is_repo_id(s: &str) -> bool {
    let ok = |p: &str| {
        !p.is_empty()
            && !p.starts_with('.')
            && !p.ends_with('.')
            && p.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    matches!(s.split_once('/'), Some((a, b)) if ok(a) && ok(b))
}

fn cache() -> Cache {
    match std::env::var_os("HF_HUB_CACHE") {
        Some(p) => Cache::new(PathBuf::from(p)),
        None => Cache::from_env(),
    }
}

fn offline() -> bool {
    std::env::var("HF_HUB_OFFLINE")
        .is_ok_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
}

/// The endpoint the downloads go to.
fn endpoint() -> String {
    std::env::var("HF_ENDPOINT").unwrap_or_else(|_| "https://huggingface.co".into()).trim_end_matches('/').to_string()
}

/// Downloads what `repo` at `revision` needs and returns its snapshot folder.
pub fn fetch(repo: &str, revision: &str) -> Result<PathBuf> {
    let r = Repo::with_revision(repo.to_string(), RepoType::Model, revision.to_string());
    if offline() {
        return cached_snapshot(&r).ok_or_else(|| {
            anyhow!("{repo}: not in the Hugging Face cache ({}) and HF_HUB_OFFLINE is set", cache().path().display())
        });
    }
    let mut b = ApiBuilder::from_cache(cache())
        .with_endpoint(endpoint())
        .with_progress(std::io::stderr().is_terminal())
        .with_retries(3);
    if let Ok(t) = std::env::var("HF_TOKEN") {
        if !t.trim().is_empty() {
            b = b.with_token(Some(t.trim().to_string()));
        }
    }
    let api = b.build().map_err(|e| anyhow!("{repo}: {e}"))?;
    let api = api.repo(r.clone());
    let info = match api.info() {
        Ok(i) => i,
        Err(e) => {
            let why = describe(repo, revision, &e);
            // The network is down: a complete cached snapshot still serves.
            if is_unreachable(&e) {
                if let Some(dir) = cached_snapshot(&r) {
                    eprintln!("famlx: warning: {why}; using the cached {}", dir.display());
                    return Ok(dir);
                }
            }
            bail!("{why}");
        }
    };
    let listed: Vec<&str> = info.siblings.iter().map(|s| s.rfilename.as_str()).collect();
    if !listed.contains(&"config.json") {
        bail!("{repo}: the repo has no config.json (not a model checkpoint famlx can load)");
    }
    let get = |f: &str| api.get(f).map_err(|e| anyhow!("{}", describe_file(repo, f, &e)));
    let config = get("config.json")?;
    let mut weights: Vec<String> = Vec::new();
    if listed.contains(&"model.safetensors.index.json") {
        let index = get("model.safetensors.index.json")?;
        let text = std::fs::read(&index)?;
        weights = famlx_formats::safetensors::index_shards(&text)
            .map_err(|e| anyhow!("{repo}: model.safetensors.index.json: {e}"))?;
        for w in &weights {
            if !listed.contains(&w.as_str()) {
                bail!("{repo}: {w}, named by model.safetensors.index.json, is not in the repo");
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
    Ok(config.parent().expect("a cached file sits in its snapshot folder").to_path_buf())
}

/// The snapshot folder of `r` in the cache, if it holds a config.json.
fn cached_snapshot(r: &Repo) -> Option<PathBuf> {
    let c = cache().repo(r.clone());
    let config = c.get("config.json")?;
    Some(config.parent()?.to_path_buf())
}

fn status(e: &hf_hub::api::sync::ApiError) -> Option<u16> {
    match e {
        hf_hub::api::sync::ApiError::RequestError(r) => match r.as_ref() {
            ureq::Error::Status(code, _) => Some(*code),
            _ => None,
        },
        hf_hub::api::sync::ApiError::TooManyRetries(inner) => status(inner),
        _ => None,
    }
}

fn is_unreachable(e: &hf_hub::api::sync::ApiError) -> bool {
    match e {
        hf_hub::api::sync::ApiError::RequestError(r) => matches!(r.as_ref(), ureq::Error::Transport(_)),
        hf_hub::api::sync::ApiError::TooManyRetries(inner) => is_unreachable(inner),
        _ => false,
    }
}

/// One line for a failed repo lookup.
fn describe(repo: &str, revision: &str, e: &hf_hub::api::sync::ApiError) -> String {
    let at = endpoint();
    match status(e) {
        Some(401) | Some(403) => {
            format!(
                "{repo}: access denied by {at} ({}): set HF_TOKEN to a token that may read it",
                status(e).unwrap_or(0)
            )
        }
        Some(404) => format!("{repo}: no such repo or revision {revision:?} on {at} (404)"),
        Some(code) => format!("{repo}: {at} answered {code}"),
        None if is_unreachable(e) => format!("{repo}: cannot reach {at}: {}", transport(e)),
        None => format!("{repo}: {e}"),
    }
}

fn describe_file(repo: &str, file: &str, e: &hf_hub::api::sync::ApiError) -> String {
    match status(e) {
        Some(code) => format!("{repo}: downloading {file}: {} answered {code}", endpoint()),
        None if is_unreachable(e) => format!("{repo}: downloading {file}: {}", transport(e)),
        None => format!("{repo}: downloading {file}: {e}"),
    }
}

fn transport(e: &hf_hub::api::sync::ApiError) -> String {
    match e {
        hf_hub::api::sync::ApiError::RequestError(r) => match r.as_ref() {
            ureq::Error::Transport(t) => t.to_string(),
            other => other.to_string(),
        },
        hf_hub::api::sync::ApiError::TooManyRetries(inner) => transport(inner),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::is_repo_id;

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
