//! Finding, checking and loading family plugins.
//!
//! A plugin file is `libfamlx_plugin_*.so` (`.dylib` on macOS,
//! `famlx_plugin_*.dll` on Windows). Directories are searched in this order,
//! earlier ones winning when two plugins claim the same `model_type`:
//! `--plugin-dir` flags, `FAMLX_PLUGIN_PATH` (colon-separated), the user data
//! dir (`~/.local/share/famlx/plugins`), then the folder of the executable
//! (so a plain `cargo build` works). Only the files directly in each
//! directory are looked at (no recursion, so a symlinked directory loop is
//! never walked), and each is checked (`file_check.rs`) before the dynamic
//! loader opens it.

pub mod catalog;
mod file_check;

use abi_stable::library::lib_header_from_path;
use anyhow::{anyhow, bail, Result};
use plugin_api::abi::{FamilyBox, PluginRef};
use plugin_api::{ABI_VERSION, ABI_VERSION_SYMBOL, MLX_VERSION_SYMBOL};
use std::ffi::CStr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A family served by a loaded plugin.
pub struct FamilyEntry {
    /// Family name.
    pub name: String,
    /// Claimed model types.
    pub model_types: Vec<String>,
    /// What the family says of each claimed model type (one entry each, in
    /// `model_types` order).
    pub catalog: Vec<plugin_api::ModelInfo>,
    /// The plugin file it came from.
    pub plugin_path: PathBuf,
    /// The family object.
    pub family: Arc<FamilyBox>,
}

/// A plugin that loaded.
pub struct LoadedPlugin {
    /// File it was loaded from.
    pub path: PathBuf,
    /// Plugin name.
    pub name: String,
    /// Its families.
    pub families: Vec<Arc<FamilyEntry>>,
}

/// A plugin file that was refused, and why.
#[derive(Debug, Clone)]
pub struct Refused {
    /// The file.
    pub path: PathBuf,
    /// The reason, one line, starting with the path.
    pub reason: String,
}

/// Every plugin found in the search directories.
#[derive(Default)]
pub struct Registry {
    /// Loaded plugins, in search order.
    pub plugins: Vec<LoadedPlugin>,
    /// Refused files.
    pub refused: Vec<Refused>,
    /// Warnings (e.g. two plugins claiming one model type).
    pub warnings: Vec<String>,
}

/// The file-name prefix and suffix of plugin libraries on this platform.
pub fn plugin_pattern() -> (&'static str, &'static str) {
    if cfg!(target_os = "macos") {
        ("libfamlx_plugin_", ".dylib")
    } else if cfg!(windows) {
        ("famlx_plugin_", ".dll")
    } else {
        ("libfamlx_plugin_", ".so")
    }
}

/// The search directories, in precedence order, after checking the
/// `--plugin-dir` ones with [`check_cli_dirs`]: what the command line uses.
pub fn plugin_search_path(cli: &[PathBuf]) -> Result<Vec<PathBuf>> {
    check_cli_dirs(cli)?;
    Ok(search_dirs(cli))
}

/// Each `--plugin-dir` must be a readable folder: one that is missing, a
/// file or a symlink loop is an error naming it. (The directories of
/// `FAMLX_PLUGIN_PATH`, the user data dir and the executable's folder are
/// not checked here: they are places plugins *may* be, and a missing one,
/// the normal case for the data dir, just holds no plugins. Their other
/// problems are warnings, see [`Registry::discover_with`].)
pub fn check_cli_dirs(cli: &[PathBuf]) -> Result<()> {
    for d in cli {
        let meta = std::fs::metadata(d).map_err(|e| anyhow!("--plugin-dir {}: {}", d.display(), io_reason(&e)))?;
        if !meta.is_dir() {
            bail!("--plugin-dir {}: not a folder", d.display());
        }
        std::fs::read_dir(d).map_err(|e| anyhow!("--plugin-dir {}: cannot list it: {}", d.display(), io_reason(&e)))?;
    }
    Ok(())
}

/// An I/O error in words (the OS's message, with a loop said plainly).
fn io_reason(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ELOOP) => "a symlink loop".into(),
        Some(libc::ENOENT) => "no such folder".into(),
        _ => e.to_string(),
    }
}

/// The search directories, in precedence order (`--plugin-dir` ones as
/// given, unchecked: see [`plugin_search_path`]).
pub fn search_dirs(cli: &[PathBuf]) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = cli.to_vec();
    if let Some(p) = std::env::var_os("FAMLX_PLUGIN_PATH") {
        dirs.extend(std::env::split_paths(&p).filter(|p| !p.as_os_str().is_empty()));
    }
    if let Some(d) = dirs::data_dir() {
        dirs.push(d.join("famlx").join("plugins"));
    }
    if let Ok(exe) = std::env::current_exe() {
        if let Some(d) = exe.parent() {
            dirs.push(d.to_path_buf());
            // Test binaries live in target/<profile>/deps; plugins one level up.
            if d.ends_with("deps") {
                if let Some(p) = d.parent() {
                    dirs.push(p.to_path_buf());
                }
            }
        }
    }
    let mut seen = std::collections::HashSet::new();
    dirs.retain(|d| seen.insert(d.canonicalize().unwrap_or_else(|_| d.clone())));
    dirs
}

/// Plugin files in one directory, sorted by name (none when it cannot be
/// listed).
pub fn plugin_files(dir: &Path) -> Vec<PathBuf> {
    list_plugin_files(dir).unwrap_or_default()
}

/// Plugin files in one directory, sorted by name: the entries named like
/// plugins (whatever they are: [`load_plugin`] refuses what is not a
/// library, so it shows up as refused instead of being skipped silently).
fn list_plugin_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let (pre, suf) = plugin_pattern();
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(pre) && n.ends_with(suf)))
        .collect();
    v.sort();
    Ok(v)
}

static RELOADS: AtomicUsize = AtomicUsize::new(0);

/// Loads one plugin file, checked first (regular file, a library of this
/// platform and machine, complete, its version stamps functions: see
/// `file_check.rs`). With `fresh`, loads a private copy so a rebuilt file is
/// really reloaded (the dynamic loader caches by path); the copy is checked
/// again (a plugin being rebuilt may be copied half-written). Libraries are
/// never unloaded: MLX kernels and compile caches may point into them.
pub fn load_plugin(path: &Path, fresh: bool) -> Result<LoadedPlugin> {
    file_check::check_library(path).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    // The copy's folder is private (mode 0700, a name no one can guess) and
    // removed once the copy is loaded: the loaded image stays mapped.
    let copy_dir = if fresh {
        Some(
            tempfile::Builder::new()
                .prefix("famlx-plugin-")
                .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
                .tempdir()
                .map_err(|e| anyhow!("{}: cannot make a folder for a fresh copy: {e}", path.display()))?,
        )
    } else {
        None
    };
    let load_path = match &copy_dir {
        Some(dir) => {
            let n = RELOADS.fetch_add(1, Ordering::Relaxed);
            let name = path.file_name().ok_or_else(|| anyhow!("{}: not a file", path.display()))?;
            let copy = dir.path().join(format!("{n}-{}", name.to_string_lossy()));
            std::fs::copy(path, &copy).map_err(|e| anyhow!("{}: cannot copy for loading: {e}", path.display()))?;
            file_check::check_library(&copy).map_err(|e| anyhow!("{}: {e}", path.display()))?;
            copy
        }
        None => path.to_path_buf(),
    };
    check_stamps(&load_path).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    let header = lib_header_from_path(&load_path).map_err(|e| match e {
        // abi_stable words this "Could load symbol: <mangled name> in library: …"
        // (sic); say plainly that the stamps are there but the root module is not.
        abi_stable::library::LibraryError::GetSymbolError { .. } => anyhow!(
            "{}: not a famlx plugin (it has the version stamps but no root module; export one with plugin_api::export_plugin!)",
            path.display()
        ),
        e => anyhow!("{}: {}", path.display(), one_line(&e.to_string())),
    })?;
    let root = header.init_root_module::<PluginRef>().map_err(|e| {
        // abi_stable's layout report runs to thousands of characters: keep
        // the verdict and what to do.
        let why = match &e {
            abi_stable::library::LibraryError::AbiInstability(_) => {
                "its plugin-api types differ from the host's although both say the same ABI version (a stale build?)"
                    .to_string()
            }
            other => one_line(&other.to_string()).chars().take(300).collect(),
        };
        anyhow!("{}: {why}; rebuild the plugin against this famlx", path.display())
    })?;
    let name = (root.name())().to_string();
    let mut families = Vec::new();
    for fam in (root.families())() {
        let fname = fam.name().to_string();
        let model_types: Vec<String> = fam.model_types().into_iter().map(|s| s.to_string()).collect();
        if model_types.is_empty() {
            bail!("{}: family `{fname}` claims no model_type", path.display());
        }
        let catalog = complete_catalog(&model_types, fam.catalog().into_vec());
        families.push(Arc::new(FamilyEntry {
            name: fname,
            model_types,
            catalog,
            plugin_path: path.to_path_buf(),
            family: Arc::new(fam),
        }));
    }
    if families.is_empty() {
        bail!("{}: plugin `{name}` provides no family", path.display());
    }
    Ok(LoadedPlugin { path: path.to_path_buf(), name, families })
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Reads the ABI and MLX stamps before touching the root module, so a
/// mismatch is reported with both versions instead of a layout error.
fn check_stamps(path: &Path) -> Result<()> {
    // SAFETY: loading a library runs its initialisers; plugins are trusted code
    // the user put in a plugin directory.
    // The loader's message repeats the path the caller already prints.
    let lib = unsafe { libloading::Library::new(path) }
        .map_err(|e| anyhow!("cannot load: {}", e.to_string().replace(&format!("{}: ", path.display()), "")))?;
    let abi: libloading::Symbol<extern "C" fn() -> u32> = unsafe { lib.get(ABI_VERSION_SYMBOL) }
        .map_err(|_| anyhow!("not a famlx plugin (no famlx_plugin_abi_version symbol)"))?;
    let theirs = abi();
    if theirs != ABI_VERSION {
        bail!("plugin ABI version {theirs} does not match the host's ABI version {ABI_VERSION}; rebuild the plugin against this famlx");
    }
    let mlxv: libloading::Symbol<extern "C" fn() -> *const std::ffi::c_char> =
        unsafe { lib.get(MLX_VERSION_SYMBOL) }
            .map_err(|_| anyhow!("not a famlx plugin (no famlx_plugin_mlx_version symbol)"))?;
    let p = mlxv();
    let theirs =
        if p.is_null() { String::from("?") } else { unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned() };
    let ours = mlx::build_version();
    if theirs != ours {
        bail!("plugin built against MLX {theirs}, host uses MLX {ours}; rebuild the plugin");
    }
    // Keep it loaded: abi_stable opens the same path next and we never unload.
    std::mem::forget(lib);
    Ok(())
}

impl Registry {
    /// Loads every plugin in `dirs` (in order). Problems are recorded, not
    /// fatal: a refused file, or a directory that exists but cannot be
    /// listed (a warning; a missing one is skipped silently, see
    /// [`check_cli_dirs`]).
    pub fn discover(dirs: &[PathBuf]) -> Registry {
        Self::discover_with(dirs, false)
    }

    /// Like [`Registry::discover`]; with `fresh`, every plugin is loaded from a
    /// private copy, so the originals can be overwritten in place while
    /// watching (a `cp` over a mapped library would corrupt running code).
    pub fn discover_with(dirs: &[PathBuf], fresh: bool) -> Registry {
        let mut r = Registry::default();
        let mut seen_names = std::collections::HashSet::new();
        for d in dirs {
            let files = match list_plugin_files(d) {
                Ok(files) => files,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    r.warnings.push(format!("plugin directory {}: cannot list it: {}", d.display(), io_reason(&e)));
                    continue;
                }
            };
            for f in files {
                // The same plugin in two directories: the earlier directory wins.
                let fname = f.file_name().map(|n| n.to_os_string());
                if !seen_names.insert(fname) {
                    continue;
                }
                match load_plugin(&f, fresh) {
                    Ok(p) => r.plugins.push(p),
                    Err(e) => r.refused.push(Refused { path: f, reason: e.to_string() }),
                }
            }
        }
        r.check_conflicts();
        r
    }

    fn check_conflicts(&mut self) {
        let mut owner: std::collections::HashMap<String, (String, PathBuf)> = Default::default();
        for p in &self.plugins {
            for f in &p.families {
                for t in &f.model_types {
                    if let Some((of, op)) = owner.get(t) {
                        self.warnings.push(format!(
                            "model_type `{t}` is claimed by `{of}` ({}) and `{}` ({}); using `{of}` (pick with --family)",
                            op.display(),
                            f.name,
                            p.path.display()
                        ));
                    } else {
                        owner.insert(t.clone(), (f.name.clone(), p.path.clone()));
                    }
                }
            }
        }
    }

    /// All families in precedence order.
    pub fn families(&self) -> impl Iterator<Item = &Arc<FamilyEntry>> {
        self.plugins.iter().flat_map(|p| p.families.iter())
    }

    /// The family serving `model_type` (or named `family` when given).
    pub fn resolve(&self, model_type: &str, family: Option<&str>) -> Result<Arc<FamilyEntry>> {
        if let Some(name) = family {
            return self
                .families()
                .find(|f| f.name == name)
                .cloned()
                .ok_or_else(|| anyhow!("--family {name}: no loaded plugin provides this family ({})", self.summary()));
        }
        self.families().find(|f| f.model_types.iter().any(|t| t == model_type)).cloned().ok_or_else(|| {
            anyhow!("unknown model_type `{model_type}`: no loaded plugin claims it ({})", self.summary())
        })
    }

    fn summary(&self) -> String {
        let fams: Vec<String> = self.families().map(|f| format!("{}: {}", f.name, f.model_types.join("/"))).collect();
        if fams.is_empty() {
            "no plugins found; see `famlx plugins`".into()
        } else {
            format!("loaded: {}", fams.join(", "))
        }
    }
}

/// One entry per claimed model type, in `model_types` order: the family's
/// own where it gave one, else a bare text entry. Entries for model types
/// the family does not claim are dropped.
fn complete_catalog(model_types: &[String], given: Vec<plugin_api::ModelInfo>) -> Vec<plugin_api::ModelInfo> {
    model_types
        .iter()
        .map(|t| {
            given.iter().find(|i| i.model_type.as_str() == t).cloned().unwrap_or_else(|| plugin_api::ModelInfo::text(t))
        })
        .collect()
}
