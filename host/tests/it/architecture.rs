//! The shape of the code base, checked: no two modules of any crate in the
//! workspace import each other (directly or around a longer circle), and no
//! source file is much past 600 lines.
//!
//! Every `.rs` file under a crate's `src/` is a module. Each file is parsed
//! (syn) and every path it names into its own crate (`crate::…`,
//! `super::…`, `self::…`, a child module) is resolved to the module that
//! defines the item, following `pub use` re-exports. A facade's `pub use`
//! of a child is the module tree, not an import; everything else is an
//! edge. A circle is a strongly connected set of two or more modules.
//! The same reading checks that the engine names no front end.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use syn::visit::Visit;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The crates of the workspace (and the out-of-tree examples): their `src/`.
fn crate_srcs() -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            if !p.is_dir() || name.starts_with('.') || ["target", "fixtures", "node_modules"].contains(&name.as_str()) {
                continue;
            }
            if name == "src" && d.join("Cargo.toml").exists() {
                out.push(p);
            } else {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

/// A module's path inside its crate (`[]` for the root).
type ModPath = Vec<String>;

fn mod_path(src: &Path, file: &Path) -> ModPath {
    let rel = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = rel.iter().map(|s| s.to_string_lossy().to_string()).collect();
    let last = parts.pop().unwrap();
    match last.trim_end_matches(".rs") {
        "mod" => {}
        "lib" | "main" if parts.is_empty() => {}
        stem => parts.push(stem.to_string()),
    }
    parts
}

/// The `.rs` files of a crate's `src/` (a binary's `main.rs` beside a
/// `lib.rs` is another crate, using the library from outside).
fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            if p.file_name().is_some_and(|n| n == "main.rs") && dir.join("lib.rs").exists() {
                continue;
            }
            out.push(p);
        }
    }
}

/// What one file defines and names.
#[derive(Default, Clone)]
struct FileInfo {
    /// Items defined at the top level.
    items: BTreeSet<String>,
    /// `pub use` re-exports: name → the full path it stands for.
    reexports: HashMap<String, ModPath>,
    /// Every path named (imports and uses in code), made absolute.
    refs: Vec<ModPath>,
}

/// Flattens a use tree into absolute paths (and, for `pub use`, the names they bind).
fn use_paths(tree: &syn::UseTree, prefix: Vec<String>, out: &mut Vec<(Option<String>, Vec<String>)>) {
    match tree {
        syn::UseTree::Path(p) => {
            let mut v = prefix;
            v.push(p.ident.to_string());
            use_paths(&p.tree, v, out);
        }
        syn::UseTree::Name(n) => {
            let mut v = prefix;
            let name = n.ident.to_string();
            if name != "self" {
                v.push(name.clone());
                out.push((Some(name), v));
            } else {
                let bound = v.last().cloned();
                out.push((bound, v));
            }
        }
        syn::UseTree::Rename(r) => {
            let mut v = prefix;
            v.push(r.ident.to_string());
            out.push((Some(r.rename.to_string()), v));
        }
        syn::UseTree::Glob(_) => out.push((None, prefix)),
        syn::UseTree::Group(g) => {
            for t in &g.items {
                use_paths(t, prefix.clone(), out);
            }
        }
    }
}

/// Makes a path relative to `here` absolute within the crate; `None` for
/// paths into other crates.
fn absolute(here: &ModPath, path: &[String], children: &BTreeSet<String>) -> Option<ModPath> {
    let first = path.first()?;
    match first.as_str() {
        "crate" => Some(path[1..].to_vec()),
        "self" => Some(here.iter().cloned().chain(path[1..].iter().cloned()).collect()),
        "super" => {
            let mut base = here.clone();
            let mut rest = path;
            while rest.first().map(String::as_str) == Some("super") {
                base.pop()?;
                rest = &rest[1..];
            }
            Some(base.into_iter().chain(rest.iter().cloned()).collect())
        }
        // A child module named without `self::` (edition 2018 paths).
        c if children.contains(c) => Some(here.iter().cloned().chain(path.iter().cloned()).collect()),
        _ => None,
    }
}

struct PathCollector<'a> {
    paths: &'a mut Vec<Vec<String>>,
}

impl<'ast> Visit<'ast> for PathCollector<'_> {
    fn visit_path(&mut self, p: &'ast syn::Path) {
        self.paths.push(p.segments.iter().map(|s| s.ident.to_string()).collect());
        syn::visit::visit_path(self, p);
    }
    fn visit_item_use(&mut self, _: &'ast syn::ItemUse) {}
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        // Inline modules (unit tests) are not part of the module graph.
        if m.content.is_none() {
            syn::visit::visit_item_mod(self, m);
        }
    }
    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        // Paths inside macro calls (format!, vec!, …): parse the tokens as expressions where possible.
        if let Ok(args) = m.parse_body_with(syn::punctuated::Punctuated::<syn::Expr, syn::Token![,]>::parse_terminated)
        {
            for a in &args {
                self.visit_expr(a);
            }
        }
        syn::visit::visit_macro(self, m);
    }
}

fn item_name(item: &syn::Item) -> Option<String> {
    Some(match item {
        syn::Item::Fn(f) => f.sig.ident.to_string(),
        syn::Item::Struct(s) => s.ident.to_string(),
        syn::Item::Enum(e) => e.ident.to_string(),
        syn::Item::Trait(t) => t.ident.to_string(),
        syn::Item::Const(c) => c.ident.to_string(),
        syn::Item::Static(s) => s.ident.to_string(),
        syn::Item::Type(t) => t.ident.to_string(),
        syn::Item::Union(u) => u.ident.to_string(),
        syn::Item::Macro(m) => m.ident.as_ref()?.to_string(),
        _ => return None,
    })
}

fn analyse(here: &ModPath, file: &syn::File, children: &BTreeSet<String>) -> FileInfo {
    let mut info = FileInfo::default();
    for item in &file.items {
        if let Some(n) = item_name(item) {
            info.items.insert(n);
        }
        if let syn::Item::Use(u) = item {
            let mut flat = Vec::new();
            use_paths(&u.tree, Vec::new(), &mut flat);
            let public = !matches!(u.vis, syn::Visibility::Inherited);
            for (bound, p) in flat {
                let Some(abs) = absolute(here, &p, children) else { continue };
                match (public, bound) {
                    // A re-export is part of the module tree, not an import.
                    (true, Some(name)) => {
                        info.reexports.insert(name, abs);
                    }
                    (true, None) => {}
                    (false, _) => info.refs.push(abs),
                }
            }
        }
    }
    let mut paths = Vec::new();
    PathCollector { paths: &mut paths }.visit_file(file);
    info.refs.extend(paths.iter().filter(|p| p.len() > 1).filter_map(|p| absolute(here, p, children)));
    // A re-exported name the module's own code also uses is an import too.
    let used: BTreeSet<&String> = paths.iter().filter_map(|p| p.first()).collect();
    for (name, target) in &info.reexports {
        if used.contains(name) {
            info.refs.push(target.clone());
        }
    }
    info
}

/// The module that defines what `path` names, following re-exports.
fn resolve(path: &ModPath, files: &BTreeMap<ModPath, FileInfo>, depth: usize) -> Option<ModPath> {
    if depth > 16 {
        return None;
    }
    // The longest prefix that is a module.
    let mut m = path.clone();
    while !files.contains_key(&m) {
        m.pop()?;
    }
    let Some(name) = path.get(m.len()) else { return Some(m) };
    let info = &files[&m];
    if info.items.contains(name) {
        return Some(m);
    }
    match info.reexports.get(name) {
        Some(target) => {
            let mut t = target.clone();
            t.extend(path[m.len() + 1..].iter().cloned());
            resolve(&t, files, depth + 1)
        }
        None => Some(m),
    }
}

/// Strongly connected components of two or more nodes (Tarjan).
fn circles(edges: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<ModPath>> {
    struct T<'a> {
        edges: &'a BTreeMap<ModPath, BTreeSet<ModPath>>,
        index: HashMap<ModPath, usize>,
        low: HashMap<ModPath, usize>,
        on: BTreeSet<ModPath>,
        stack: Vec<ModPath>,
        n: usize,
        out: Vec<Vec<ModPath>>,
    }
    fn visit(t: &mut T, v: &ModPath) {
        t.index.insert(v.clone(), t.n);
        t.low.insert(v.clone(), t.n);
        t.n += 1;
        t.stack.push(v.clone());
        t.on.insert(v.clone());
        let next: Vec<ModPath> = t.edges.get(v).map(|s| s.iter().cloned().collect()).unwrap_or_default();
        for w in next {
            if !t.index.contains_key(&w) {
                visit(t, &w);
                let lw = t.low[&w];
                let lv = t.low[v];
                t.low.insert(v.clone(), lv.min(lw));
            } else if t.on.contains(&w) {
                let iw = t.index[&w];
                let lv = t.low[v];
                t.low.insert(v.clone(), lv.min(iw));
            }
        }
        if t.low[v] == t.index[v] {
            let mut scc = Vec::new();
            loop {
                let w = t.stack.pop().unwrap();
                t.on.remove(&w);
                let done = &w == v;
                scc.push(w);
                if done {
                    break;
                }
            }
            if scc.len() > 1 {
                t.out.push(scc);
            }
        }
    }
    let mut t = T {
        edges,
        index: HashMap::new(),
        low: HashMap::new(),
        on: BTreeSet::new(),
        stack: Vec::new(),
        n: 0,
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !t.index.contains_key(v) {
            visit(&mut t, v);
        }
    }
    t.out
}

/// Every module of the crate at `src`, parsed: what it defines and names,
/// and its file.
fn crate_modules(src: &Path) -> BTreeMap<ModPath, (PathBuf, FileInfo)> {
    let mut files = Vec::new();
    rs_files(src, &mut files);
    let mods: BTreeSet<ModPath> = files.iter().map(|f| mod_path(src, f)).collect();
    let mut out = BTreeMap::new();
    for f in &files {
        let here = mod_path(src, f);
        let children: BTreeSet<String> = mods
            .iter()
            .filter(|m| m.len() == here.len() + 1 && m.starts_with(&here))
            .map(|m| m[here.len()].clone())
            .collect();
        let text = std::fs::read_to_string(f).unwrap();
        let Ok(file) = syn::parse_file(&text) else { continue };
        out.insert(here.clone(), (f.clone(), analyse(&here, &file, &children)));
    }
    out
}

#[test]
fn no_two_modules_import_each_other() {
    let mut report = Vec::new();
    let srcs = crate_srcs();
    assert!(srcs.len() >= 8, "found only {srcs:?}");
    for src in srcs {
        let infos: BTreeMap<ModPath, FileInfo> = crate_modules(&src).into_iter().map(|(m, (_, i))| (m, i)).collect();
        let mut edges: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
        for (m, info) in &infos {
            for r in &info.refs {
                if let Some(t) = resolve(r, &infos, 0) {
                    if &t != m {
                        edges.entry(m.clone()).or_default().insert(t);
                    }
                }
            }
        }
        for c in circles(&edges) {
            let names: Vec<String> =
                c.iter().map(|m| if m.is_empty() { "(root)".into() } else { m.join("::") }).collect();
            report.push(format!("{}: {}", src.strip_prefix(root()).unwrap_or(&src).display(), names.join(" <-> ")));
        }
    }
    assert!(report.is_empty(), "modules that import each other:\n{}", report.join("\n"));
}

#[test]
fn the_engine_knows_no_front_end() {
    // The engine serves any front end: it never names the command line,
    // the server, or the commands beside them.
    let front = ["cli", "serve", "convert", "hub", "scaffold"];
    let src = root().join("host/src");
    let modules = crate_modules(&src);
    assert!(modules.contains_key(&vec!["engine".to_string()]), "no engine module under {}", src.display());
    let infos: BTreeMap<ModPath, FileInfo> = modules.iter().map(|(m, (_, i))| (m.clone(), i.clone())).collect();
    let mut report = BTreeSet::new();
    for (m, (file, info)) in modules.iter().filter(|(m, _)| m.first().map(String::as_str) == Some("engine")) {
        for r in &info.refs {
            // What it names, and the module that defines it (through re-exports).
            let target = resolve(r, &infos, 0).unwrap_or_else(|| r.clone());
            for p in [r, &target] {
                if p.first().is_some_and(|f| front.contains(&f.as_str())) {
                    let rel = file.strip_prefix(root()).unwrap_or(file).display().to_string();
                    report.insert(format!("{rel} ({}) imports crate::{}", m.join("::"), r.join("::")));
                }
            }
        }
    }
    assert!(
        report.is_empty(),
        "the engine imports a front end:\n{}",
        report.into_iter().collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn source_files_stay_short() {
    // Files that read better whole (none today; the C++ shim is not Rust).
    let allowed: &[&str] = &[];
    let mut long = Vec::new();
    for src in crate_srcs() {
        let mut files = Vec::new();
        rs_files(&src, &mut files);
        for f in files {
            let rel = f.strip_prefix(root()).unwrap().display().to_string();
            let n = std::fs::read_to_string(&f).unwrap().lines().count();
            if n > 650 && !allowed.iter().any(|a| rel.ends_with(a)) {
                long.push(format!("{rel}: {n} lines"));
            }
        }
    }
    assert!(long.is_empty(), "files past ~600 lines:\n{}", long.join("\n"));
}
