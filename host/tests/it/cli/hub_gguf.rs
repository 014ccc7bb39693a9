//! GGUF repos on the hub (`--model org/NAME-GGUF[:TAG]`, as llama.cpp's
//! `-hf`) against the stand-in of tests/it/common/hub_server.rs: the tag
//! picks one file (or a split file's parts) and only it is downloaded, a
//! repo of several models and no tag is one line listing the tags, a
//! projector or imatrix file is never a model, a tag no file has is one
//! line, the cache serves offline; a split GGUF loads from its first part.
//!
//! The repos hold the small real GGUF files of fixtures/gguf-text/ under
//! the names GGUF repos use: which file comes is what these tests check, so
//! a file named `Q4_K_M` may hold float32 weights.

use crate::common;

use super::hub::{expected, fails, file_gets, generate, tokens, IDS, SHA};
use common::hub_server::{HubRepo, HubServer};
use common::{famlx, fixture, Scratch};
use famlx_formats::gguf::write::Writer;
use famlx_formats::gguf::{Gguf, MetaValue};
use std::path::{Path, PathBuf};

fn gguf(file: &str) -> Vec<u8> {
    std::fs::read(fixture("gguf-text").join(file)).unwrap()
}

/// The tokens famlx generates from a local file, as [`generate`] asks.
fn expected_from(path: &Path) -> serde_json::Value {
    let o = famlx()
        .args(["generate", "--model"])
        .arg(path)
        .args(["--prompt-ids", IDS, "--max-tokens", "6", "--json"])
        .output()
        .unwrap();
    tokens(&o)
}

/// `bytes` (a GGUF) as two parts the way llama.cpp's `gguf-split` writes
/// them: the metadata in the first, `split.no` / `split.count` /
/// `split.tensors.count` in each, the tensors halved.
fn split_in_two(bytes: &[u8]) -> [Vec<u8>; 2] {
    let g = Gguf::from_vec(bytes.to_vec()).unwrap();
    let mut parts = [Writer::new(), Writer::new()];
    let mut meta: Vec<_> = g.metadata.iter().filter(|(k, _)| *k != "general.alignment").collect();
    meta.sort_by(|a, b| a.0.cmp(b.0));
    for (k, v) in meta {
        parts[0].meta(k, v.clone());
    }
    for (i, w) in parts.iter_mut().enumerate() {
        w.meta("split.no", MetaValue::Ints(vec![i as i64]))
            .meta("split.count", MetaValue::Ints(vec![2]))
            .meta("split.tensors.count", MetaValue::Ints(vec![g.tensors.len() as i64]));
    }
    let half = g.tensors.len() / 2;
    for (i, t) in g.tensors.iter().enumerate() {
        parts[(i >= half) as usize].tensor(&t.name, &t.dims, t.ggml_type, g.data(t).unwrap().to_vec());
    }
    [parts[0].to_bytes(), parts[1].to_bytes()]
}

/// Three quantizations, a projector, an importance matrix and a README.
fn quants_repo() -> HubRepo {
    HubRepo::with_files(
        "famlx-test/qwen2-GGUF",
        vec![
            ("README.md", b"# qwen2 GGUF".to_vec()),
            ("qwen2-Q8_0.gguf", gguf("qwen2-q8_0.gguf")),
            ("qwen2-F32.gguf", gguf("qwen2-f32.gguf")),
            ("Q4_K_M/qwen2.q4_k_m.gguf", gguf("qwen2-f32.gguf")),
            ("mmproj-qwen2-F16.gguf", gguf("qwen2-f32.gguf")),
            ("imatrix.gguf", b"not a model".to_vec()),
        ],
    )
}

/// One model file (and a projector beside it).
fn single_repo() -> HubRepo {
    HubRepo::with_files(
        "famlx-test/single-GGUF",
        vec![("qwen2-Q8_0.gguf", gguf("qwen2-q8_0.gguf")), ("mmproj-F16.gguf", gguf("qwen2-f32.gguf"))],
    )
}

/// The f32 file split in two parts in a folder, and a whole Q8_0 file.
fn split_repo() -> HubRepo {
    let [a, b] = split_in_two(&gguf("qwen2-f32.gguf"));
    HubRepo::with_files(
        "famlx-test/split-GGUF",
        vec![
            ("F32/qwen2-F32-00001-of-00002.gguf", a),
            ("F32/qwen2-F32-00002-of-00002.gguf", b),
            ("qwen2-Q8_0.gguf", gguf("qwen2-q8_0.gguf")),
        ],
    )
}

/// The files of `repo`'s snapshot in the cache at `home`, `/`-separated.
fn snapshot_files(home: &Path, repo: &str) -> Vec<String> {
    let dir = home.join("hub").join(format!("models--{}", repo.replace('/', "--"))).join("snapshots").join(SHA);
    let mut out = Vec::new();
    let mut todo = vec![(dir, String::new())];
    while let Some((d, rel)) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let path = if rel.is_empty() { name } else { format!("{rel}/{name}") };
            if e.path().is_dir() {
                todo.push((e.path(), path));
            } else {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The files fetched in `log` (the resolve `GET`s), by name.
fn fetched(log: &[String]) -> Vec<String> {
    let mut f: Vec<String> = file_gets(log)
        .iter()
        .map(|l| l.split_whitespace().nth(1).unwrap().split(&format!("/resolve/{SHA}/")).nth(1).unwrap().to_string())
        .collect();
    f.sort();
    f.dedup();
    f
}

#[test]
fn a_tag_picks_one_quantization_and_only_it_is_downloaded() {
    let s = Scratch::new("hub-gguf-tag");
    let mut hub = HubServer::start(vec![quants_repo()]);
    let q8 = expected_from(&fixture("gguf-text").join("qwen2-q8_0.gguf"));
    let repo = "famlx-test/qwen2-GGUF";

    // Several models and no tag: one line listing them (not the projector
    // or the imatrix), and nothing downloaded.
    let e = fails(&generate(repo, s.path(), &hub.endpoint, &[]));
    assert!(e.contains("F32, Q4_K_M, Q8_0") && e.contains(&format!("--model {repo}:")), "{e}");
    assert!(!e.contains("mmproj") && !e.contains("imatrix"), "{e}");
    assert!(file_gets(&hub.log()).is_empty(), "{:#?}", hub.log());

    let o = generate(&format!("{repo}:Q8_0"), s.path(), &hub.endpoint, &[]);
    assert_eq!(tokens(&o), q8);
    assert_eq!(fetched(&hub.log()), ["qwen2-Q8_0.gguf"]);
    assert_eq!(snapshot_files(s.path(), repo), ["qwen2-Q8_0.gguf"]);
    // Case-insensitive, in a folder, in a name written `model.q4_k_m.gguf`.
    let before = hub.log().len();
    let f32 = expected_from(&fixture("gguf-text").join("qwen2-f32.gguf"));
    assert_eq!(tokens(&generate(&format!("{repo}:q4_k_m"), s.path(), &hub.endpoint, &[])), f32);
    assert_eq!(fetched(&hub.log()[before..]), ["Q4_K_M/qwen2.q4_k_m.gguf"]);

    // A tag no file has: one line listing what there is.
    let e = fails(&generate(&format!("{repo}:Q2_K"), s.path(), &hub.endpoint, &[]));
    assert!(e.contains(":Q2_K") && e.contains("F32, Q4_K_M, Q8_0"), "{e}");
    // `Q4_K` is a whole tag: it does not pick Q4_K_M.
    let e = fails(&generate(&format!("{repo}:Q4_K"), s.path(), &hub.endpoint, &[]));
    assert!(e.contains(":Q4_K;"), "{e}");
    let e = fails(&generate(&format!("{repo}:Q4 K"), s.path(), &hub.endpoint, &[]));
    assert!(e.contains("not a quantization tag"), "{e}");

    // Offline: a cached tag serves with no request; one not cached is not
    // in the cache; no tag, with two models cached, lists them.
    let before = hub.log().len();
    let off = [("HF_HUB_OFFLINE", "1")];
    assert_eq!(tokens(&generate(&format!("{repo}:Q8_0"), s.path(), &hub.endpoint, &off)), q8);
    let e = fails(&generate(&format!("{repo}:F32"), s.path(), &hub.endpoint, &off));
    assert!(e.contains("not in the Hugging Face cache"), "{e}");
    let e = fails(&generate(repo, s.path(), &hub.endpoint, &off));
    assert!(e.contains("Q4_K_M, Q8_0") && e.contains(&format!("--model {repo}:")), "{e}");
    assert_eq!(hub.log().len(), before);
    // The network down: the cached file, with a warning.
    hub.stop();
    let o = generate(&format!("{repo}:Q8_0"), s.path(), &hub.endpoint, &[]);
    assert_eq!(tokens(&o), q8);
    assert!(common::texts(&o).1.contains("using the cached"), "{}", common::texts(&o).1);
    let log = hub.log();
    assert!(!log.iter().any(|l| l.contains("mmproj") || l.contains("imatrix") || l.contains("F32")), "{log:#?}");
}

#[test]
fn a_repo_of_one_model_needs_no_tag() {
    let s = Scratch::new("hub-gguf-single");
    let hub = HubServer::start(vec![single_repo()]);
    let o = generate("famlx-test/single-GGUF", s.path(), &hub.endpoint, &[]);
    assert_eq!(tokens(&o), expected_from(&fixture("gguf-text").join("qwen2-q8_0.gguf")));
    assert_eq!(fetched(&hub.log()), ["qwen2-Q8_0.gguf"]);
    let before = hub.log().len();
    let o = generate("famlx-test/single-GGUF", s.path(), &hub.endpoint, &[("HF_HUB_OFFLINE", "1")]);
    assert_eq!(tokens(&o), expected_from(&fixture("gguf-text").join("qwen2-q8_0.gguf")));
    assert_eq!(hub.log().len(), before);
}

#[test]
fn a_split_gguf_is_fetched_whole_and_loads_from_its_first_part() {
    let s = Scratch::new("hub-gguf-split");
    let hub = HubServer::start(vec![split_repo()]);
    let repo = "famlx-test/split-GGUF";
    let f32 = expected_from(&fixture("gguf-text").join("qwen2-f32.gguf"));
    let o = generate(&format!("{repo}:f32"), s.path(), &hub.endpoint, &[]);
    assert_eq!(tokens(&o), f32);
    let parts = ["F32/qwen2-F32-00001-of-00002.gguf", "F32/qwen2-F32-00002-of-00002.gguf"];
    assert_eq!(fetched(&hub.log()), parts);
    let e = fails(&generate(repo, s.path(), &hub.endpoint, &[]));
    assert!(e.contains("F32, Q8_0"), "{e}");

    // The parts on their own: the first loads (same tokens), the second
    // names the first, a missing second part is named.
    let dir = s.path().join("local");
    std::fs::create_dir(&dir).unwrap();
    let snap = s.path().join("hub/models--famlx-test--split-GGUF/snapshots").join(SHA);
    let local: Vec<PathBuf> = parts
        .iter()
        .map(|p| {
            let to = dir.join(Path::new(p).file_name().unwrap());
            std::fs::copy(snap.join(p), &to).unwrap();
            to
        })
        .collect();
    assert_eq!(expected_from(&local[0]), f32);
    let mut c = famlx();
    c.args(["generate", "--model"]).arg(&local[1]).args(["--prompt-ids", IDS, "--max-tokens", "2"]);
    let e = fails(&c.output().unwrap());
    assert!(e.contains("part 2 of a split GGUF (2 parts)") && e.contains("qwen2-F32-00001-of-00002.gguf"), "{e}");
    std::fs::remove_file(&local[1]).unwrap();
    let mut c = famlx();
    c.args(["generate", "--model"]).arg(&local[0]).args(["--prompt-ids", IDS, "--max-tokens", "2"]);
    let e = fails(&c.output().unwrap());
    assert!(e.contains("split GGUF (2 parts)") && e.contains("qwen2-F32-00002-of-00002.gguf") && e.contains("missing"));
}

#[test]
fn a_local_path_with_a_colon_is_not_a_repo() {
    let s = Scratch::new("hub-gguf-colon");
    let hub = HubServer::start(vec![quants_repo()]);
    // `famlx-test/llama:main`, a folder in the working directory.
    let dir = s.path().join("famlx-test/llama:main");
    std::fs::create_dir_all(&dir).unwrap();
    for e in std::fs::read_dir(fixture("llama-hf-bf16")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
    }
    let mut c = famlx();
    c.current_dir(s.path())
        .args(["generate", "--model", "famlx-test/llama:main", "--prompt-ids", IDS, "--max-tokens", "6", "--json"])
        .env("HF_HOME", s.path().join("home"))
        .env("HF_ENDPOINT", &hub.endpoint)
        .env_remove("HF_HUB_OFFLINE");
    assert_eq!(tokens(&c.output().unwrap()), expected());
    assert!(hub.log().is_empty(), "{:#?}", hub.log());
}
