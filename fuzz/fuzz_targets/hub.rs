//! The hub's header handling (`famlx_formats::hub`): whatever a server
//! sends as commit, ETag, size or file name, and whatever revision a user
//! types, every cache path built from them stays inside the cache folder
//! (and a snapshot's link lands on its blob), or they are refused in one
//! line; split-GGUF part names parse or not, never panic. Input: repo id,
//! revision, commit, ETag and file name, one a line;
//! each checker also gets the whole input. Must never crash.
#![no_main]

use famlx_formats::hub::{
    commit, etag, file_paths, ref_path, repo_file, repo_folder, revision, size, snapshot_dir, stays_inside,
};
use libfuzzer_sys::fuzz_target;
use std::path::{Component, Path, PathBuf};

fn one_line<T>(r: Result<T, famlx_formats::Error>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            assert!(!e.0.contains(['\n', '\r']), "error of more than one line: {e}");
            None
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let all = text.as_ref();
    if let Some(t) = one_line(etag(all)) {
        assert!(matches!(t.len(), 40 | 64) && stays_inside(Path::new(t)));
    }
    if let Some(c) = one_line(commit(all)) {
        assert!(stays_inside(Path::new(c)));
    }
    let _ = one_line(size(all));
    let _ = one_line(repo_folder(all));
    let _ = one_line(revision(all));
    let _ = one_line(repo_file(all));
    // Split-GGUF part names (a listing's file names): parsed or `None`,
    // and a part name rebuilt from one parses back to that part.
    if let Some((prefix, _, of, _)) = famlx_formats::gguf::split_name(all) {
        let next = famlx_formats::gguf::part_name(all, of).expect("a split name has parts");
        assert_eq!(famlx_formats::gguf::split_name(&next).map(|p| (p.0, p.1)), Some((prefix, of)));
    }

    let mut f = all.split('\n');
    let mut next = || f.next().unwrap_or("");
    let (repo, rev, sha, tag, file) = (next(), next(), next(), next(), next());
    if let Some(p) = one_line(file_paths(repo, sha, tag, file)) {
        for q in [&p.blob, &p.incomplete, &p.lock, &p.pointer] {
            assert!(stays_inside(q), "{} leaves the cache", q.display());
        }
        // The link, followed from the pointer's folder, is the blob.
        let mut at: Vec<Component> = p.pointer.parent().unwrap().components().collect();
        for c in p.link.components() {
            match c {
                Component::ParentDir => assert!(at.pop().is_some(), "{} climbs out", p.link.display()),
                Component::Normal(_) => at.push(c),
                other => panic!("{other:?} in a link"),
            }
        }
        assert_eq!(at.iter().collect::<PathBuf>(), p.blob);
    }
    if let Some(r) = one_line(ref_path(repo, rev)) {
        assert!(stays_inside(&r), "{} leaves the cache", r.display());
    }
    if let Some(s) = one_line(snapshot_dir(repo, sha)) {
        assert!(stays_inside(&s), "{} leaves the cache", s.display());
    }
});
