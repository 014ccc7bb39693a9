//! Hot reload: watch the plugin directories and, when the library serving the
//! active model is rebuilt, load the new build from a fresh copy and rebuild
//! the model from the weights already in memory.

use crate::plugins::{load_plugin, plugin_pattern};
use crate::session::Session;
use anyhow::{anyhow, Result};
use notify_debouncer_mini::{new_debouncer, notify::RecursiveMode, DebounceEventResult, Debouncer};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::Duration;

/// Quiet time before a change counts: long enough for a linker to finish
/// writing, short enough to stay well inside a quarter second.
const DEBOUNCE: Duration = Duration::from_millis(40);

/// What identifies one build of a file: reading it (as loading a fresh copy
/// does) raises watch events too, and must not count as a change.
type Stamp = (std::time::SystemTime, u64, u64);

fn stamp(p: &Path) -> Option<Stamp> {
    let m = std::fs::metadata(p).ok()?;
    #[cfg(unix)]
    let ino = std::os::unix::fs::MetadataExt::ino(&m);
    #[cfg(not(unix))]
    let ino = 0;
    Some((m.modified().ok()?, m.len(), ino))
}

/// Watches plugin directories for rebuilt plugin files.
pub struct PluginWatcher {
    rx: Receiver<Vec<PathBuf>>,
    seen: std::cell::RefCell<std::collections::HashMap<PathBuf, Option<Stamp>>>,
    _debouncer: Debouncer<notify_debouncer_mini::notify::RecommendedWatcher>,
}

fn is_plugin_file(p: &Path) -> bool {
    let (pre, suf) = plugin_pattern();
    p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(pre) && n.ends_with(suf))
}

impl PluginWatcher {
    /// Starts watching the existing directories among `dirs`.
    pub fn new(dirs: &[PathBuf]) -> Result<PluginWatcher> {
        let (tx, rx) = channel();
        let mut debouncer = new_debouncer(DEBOUNCE, move |res: DebounceEventResult| {
            if let Ok(events) = res {
                let paths: Vec<PathBuf> = events.into_iter().map(|e| e.path).filter(|p| is_plugin_file(p)).collect();
                if !paths.is_empty() {
                    let _ = tx.send(paths);
                }
            }
        })
        .map_err(|e| anyhow!("cannot watch plugin directories: {e}"))?;
        let mut seen = std::collections::HashMap::new();
        for d in dirs.iter().filter(|d| d.is_dir()) {
            for f in crate::plugins::plugin_files(d) {
                let st = stamp(&f);
                seen.insert(f, st);
            }
            debouncer
                .watcher()
                .watch(d, RecursiveMode::NonRecursive)
                .map_err(|e| anyhow!("{}: cannot watch: {e}", d.display()))?;
        }
        Ok(PluginWatcher { rx, seen: std::cell::RefCell::new(seen), _debouncer: debouncer })
    }

    /// Changed plugin files, waiting at most `timeout` for the first change.
    pub fn changed(&self, timeout: Duration) -> Vec<PathBuf> {
        let mut out = match self.rx.recv_timeout(timeout) {
            Ok(v) => v,
            Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => return Vec::new(),
        };
        while let Ok(v) = self.rx.try_recv() {
            out.extend(v);
        }
        out.sort();
        out.dedup();
        // Keep only files whose contents really changed since last seen.
        let mut seen = self.seen.borrow_mut();
        out.retain(|p| {
            let now = stamp(p);
            now.is_some() && seen.insert(p.clone(), now) != Some(now)
        });
        out
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// Outcome of handling a batch of changed files.
pub enum Reload {
    /// Nothing concerned the active model.
    Unrelated,
    /// Swapped; the message says what and how long it took.
    Swapped(String),
    /// The new build was refused; the old plugin keeps serving.
    Failed(String),
}

/// Reloads the active model's plugin if it is among `changed`.
pub fn reload_if_changed(s: &mut Session, changed: &[PathBuf]) -> Reload {
    let serving = s.model.family.plugin_path.clone();
    let Some(path) = changed.iter().find(|p| same_file(p, &serving)) else {
        return Reload::Unrelated;
    };
    let name = s.model.family.name.clone();
    // Latency is measured from the file's last write, so it includes the debounce.
    let written = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let result = (|| -> Result<bool> {
        let plugin = load_plugin(path, true)?;
        let fam = plugin
            .families
            .iter()
            .find(|f| f.name == name)
            .cloned()
            .ok_or_else(|| anyhow!("the new build no longer provides family `{name}`"))?;
        s.swap_family(fam)
    })();
    match result {
        Ok(kept) => Reload::Swapped(format!(
            "famlx: reloaded `{name}` from {} in {} ms ({})",
            path.display(),
            written.and_then(|t| t.elapsed().ok()).map_or(0, |d| d.as_millis()),
            if kept { "caches kept" } else { "new cache layout: history re-prefilled" }
        )),
        Err(e) => Reload::Failed(format!("famlx: reload of {} failed, keeping the old plugin: {e:#}", path.display())),
    }
}
