//! host's integration tests stay one binary: no test file beside `it/`
//! (cargo would build it as another binary linking all of host) but the
//! one that must be apart, and no file under `it/` that `main.rs` does not
//! declare (it would never run).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests")
}

/// The module files `main.rs` declares (`mod x;`, nested in inline
/// `mod group { … }` blocks, and in folder modules `x/mod.rs` outside
/// `common/`), as paths under `it/`.
fn declared() -> BTreeSet<PathBuf> {
    fn walk(items: &[syn::Item], dir: &Path, out: &mut BTreeSet<PathBuf>) {
        for item in items {
            let syn::Item::Mod(m) = item else { continue };
            let name = m.ident.to_string();
            match &m.content {
                Some((_, inner)) => walk(inner, &dir.join(&name), out),
                None => {
                    let folder = dir.join(&name).join("mod.rs");
                    let path = tests_dir().join("it").join(&folder);
                    if name != "common" && path.is_file() {
                        let file = syn::parse_file(&std::fs::read_to_string(&path).unwrap()).unwrap();
                        walk(&file.items, &dir.join(&name), out);
                        out.insert(folder);
                    } else {
                        out.insert(dir.join(format!("{name}.rs")));
                    }
                }
            }
        }
    }
    let main = tests_dir().join("it/main.rs");
    let file = syn::parse_file(&std::fs::read_to_string(&main).unwrap()).unwrap();
    let mut out = BTreeSet::new();
    walk(&file.items, Path::new(""), &mut out);
    out
}

/// The `.rs` files under `it/` but `main.rs` and the helpers in `common/`
/// (a module tree of their own, from `common/mod.rs`).
fn present() -> BTreeSet<PathBuf> {
    let root = tests_dir().join("it");
    let mut out = BTreeSet::new();
    let mut stack = vec![root.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let rel = p.strip_prefix(&root).unwrap().to_path_buf();
            if p.is_dir() {
                if rel != Path::new("common") {
                    stack.push(p);
                }
            } else if p.extension().is_some_and(|x| x == "rs") && rel != Path::new("main.rs") {
                out.insert(rel);
            }
        }
    }
    out
}

#[test]
fn every_test_file_is_a_module_of_the_one_binary() {
    let (declared, present) = (declared(), present());
    let orphans: Vec<_> = present.difference(&declared).collect();
    assert!(orphans.is_empty(), "files under host/tests/it/ that main.rs does not declare (never built): {orphans:?}");
    // A declared module with no file of its own may be a folder (`common/mod.rs`).
    let it = tests_dir().join("it");
    let missing: Vec<_> = declared
        .difference(&present)
        .filter(|p| !it.join(p).is_file() && !it.join(p.with_extension("")).join("mod.rs").is_file())
        .collect();
    assert!(missing.is_empty(), "main.rs declares modules with no file: {missing:?}");
    // Beside it/: only data.
    let mut extra: Vec<String> = std::fs::read_dir(tests_dir())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !["it", "data"].contains(&n.as_str()))
        .collect();
    extra.sort();
    assert!(
        extra.is_empty(),
        "host/tests/ holds {extra:?}: each would be its own test binary; make it a module under tests/it/ instead"
    );
}
