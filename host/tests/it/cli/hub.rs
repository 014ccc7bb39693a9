//! `--model org/name` against a hub stand-in on 127.0.0.1
//! (tests/it/common/hub_server.rs), started and stopped by each test: only the
//! files a checkpoint needs are fetched into the standard cache layout, a
//! cut download resumes, a filled cache (famlx's or Python
//! huggingface_hub's) is reused, offline mode, and one clear line for each
//! failure. A hostile hub (paths in ETags and commits, redirect loops,
//! bodies longer than announced, stalls) is refused in one line, with
//! nothing written outside the cache.

use crate::common;

use common::hub_server::{etag_of, Body, HubRepo, HubServer};
use common::{famlx, fixture, json_of, texts, Scratch};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

pub(crate) const IDS: &str = "1,5,9,33,70,2,101,7";
/// The commit the stand-in serves every repo at.
pub(crate) const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

/// `famlx generate --model REPO` with the hub at `endpoint` and the cache in `home`.
pub(crate) fn generate(repo: &str, home: &Path, endpoint: &str, env: &[(&str, &str)]) -> Output {
    let mut c = famlx();
    c.args(["generate", "--model", repo, "--prompt-ids", IDS, "--max-tokens", "6", "--json"])
        .env("HF_HOME", home)
        .env("HF_ENDPOINT", endpoint)
        .env_remove("HF_HUB_OFFLINE")
        .env_remove("HF_TOKEN")
        .env_remove("HF_HUB_CACHE");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

pub(crate) fn tokens(o: &Output) -> serde_json::Value {
    json_of(o)["tokens"].clone()
}

pub(crate) fn fails(o: &Output) -> String {
    let (out, err) = texts(o);
    assert!(!o.status.success(), "should have failed:\n{out}\n{err}");
    assert!(!err.contains("panicked"), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one error line: {err}");
    eprintln!("  → {}", lines[0]);
    err
}

fn llama_repo() -> HubRepo {
    // An extra weights file the checkpoint does not need is never fetched.
    HubRepo::from_dir("famlx-test/llama", &fixture("llama-hf-bf16"), &[("pytorch_model.bin", b"not needed")])
}

pub(crate) fn expected() -> serde_json::Value {
    let o = famlx()
        .args(["generate", "--model"])
        .arg(fixture("llama-hf-bf16"))
        .args(["--prompt-ids", IDS, "--max-tokens", "6", "--json"])
        .output()
        .unwrap();
    tokens(&o)
}

pub(crate) fn file_gets(log: &[String]) -> Vec<String> {
    log.iter().filter(|l| l.starts_with("GET") && l.contains("/resolve/")).cloned().collect()
}

#[test]
fn downloads_only_what_the_checkpoint_needs_and_reuses_the_cache() {
    let s = Scratch::new("hub-download");
    let mut hub = HubServer::start(vec![llama_repo()]);
    let o = generate("famlx-test/llama", s.path(), &hub.endpoint, &[]);
    assert_eq!(tokens(&o), expected());
    let log = hub.log();
    assert!(!log.iter().any(|l| l.contains("pytorch_model.bin")), "{log:#?}");
    // Files are fetched at the commit the listing names (a branch moving
    // mid-download cannot mix two commits in one snapshot).
    for f in ["config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors", "tokenizer.json"] {
        assert!(log.iter().any(|l| l.contains(&format!("/resolve/{SHA}/{f}"))), "{f} not fetched: {log:#?}");
    }
    // The standard cache layout, so Python's huggingface_hub finds it too.
    let snap = s.path().join("hub/models--famlx-test--llama/snapshots/0123456789abcdef0123456789abcdef01234567");
    assert!(snap.join("config.json").exists() && snap.join("model-00002-of-00002.safetensors").exists());
    let main = std::fs::read_to_string(s.path().join("hub/models--famlx-test--llama/refs/main")).unwrap();
    assert_eq!(main.trim(), "0123456789abcdef0123456789abcdef01234567");

    // Again: the cache serves every file; only the repo listing is asked for.
    let before = hub.log().len();
    let o = generate("famlx-test/llama", s.path(), &hub.endpoint, &[]);
    assert_eq!(tokens(&o), expected());
    let again = &hub.log()[before..];
    assert!(file_gets(again).is_empty(), "files fetched again: {again:#?}");

    // Offline: the cache alone, no request at all.
    let before = hub.log().len();
    let o = generate("famlx-test/llama", s.path(), &hub.endpoint, &[("HF_HUB_OFFLINE", "1")]);
    assert_eq!(tokens(&o), expected());
    assert_eq!(hub.log().len(), before);
    // `convert` takes a repo id too.
    let out = s.path().join("converted");
    let mut c = famlx();
    c.args(["convert", "--hf-path", "famlx-test/llama", "-q", "--mlx-path"])
        .arg(&out)
        .env("HF_HOME", s.path())
        .env("HF_HUB_OFFLINE", "1");
    let o = c.output().unwrap();
    assert!(o.status.success(), "{}", texts(&o).1);
    assert!(out.join("config.json").exists());

    // The network down: the complete cached snapshot, with a warning.
    hub.stop();
    let o = generate("famlx-test/llama", s.path(), &hub.endpoint, &[]);
    assert_eq!(tokens(&o), expected());
    assert!(texts(&o).1.contains("using the cached"), "{}", texts(&o).1);
}

#[test]
fn a_cut_download_resumes_where_it_stopped() {
    let s = Scratch::new("hub-resume");
    let hub = HubServer::start(vec![llama_repo()]);
    let shard = "model-00001-of-00002.safetensors";
    // Every transfer of the shard breaks halfway: the run fails naming it...
    hub.state.lock().unwrap().cut = Some(shard.into());
    let e = fails(&generate("famlx-test/llama", s.path(), &hub.endpoint, &[]));
    assert!(e.contains(shard), "{e}");
    // ...and the next one picks up from the bytes already on disk.
    hub.state.lock().unwrap().cut = None;
    let before = hub.log().len();
    let o = generate("famlx-test/llama", s.path(), &hub.endpoint, &[]);
    assert_eq!(tokens(&o), expected());
    let resumed = hub.log()[before..].iter().any(|l| {
        l.starts_with("GET") && l.contains(shard) && l.split("bytes=").nth(1).is_some_and(|r| !r.starts_with("0-"))
    });
    assert!(resumed, "no ranged request past the start: {:#?}", &hub.log()[before..]);
    let snap = s.path().join("hub/models--famlx-test--llama/snapshots/0123456789abcdef0123456789abcdef01234567");
    assert_eq!(std::fs::read(snap.join(shard)).unwrap(), std::fs::read(fixture("llama-hf-bf16").join(shard)).unwrap());
}

#[test]
fn a_cache_filled_by_python_huggingface_hub_serves_famlx() {
    let s = Scratch::new("hub-python");
    let mut hub = HubServer::start(vec![llama_repo()]);
    let script = "import sys; from huggingface_hub import snapshot_download; \
                  print(snapshot_download(sys.argv[1], allow_patterns=['*.json', '*.safetensors']))";
    let o = std::process::Command::new(common::reference::python())
        .args(["-c", script, "famlx-test/llama"])
        .env("HF_HOME", s.path())
        .env("HF_ENDPOINT", &hub.endpoint)
        .env_remove("HF_HUB_OFFLINE")
        .output()
        .unwrap();
    assert!(o.status.success(), "snapshot_download: {}", String::from_utf8_lossy(&o.stderr));
    // And the reverse: a cache famlx filled serves Python offline.
    let mine = s.path().join("famlx-filled");
    assert_eq!(tokens(&generate("famlx-test/llama", &mine, &hub.endpoint, &[])), expected());
    hub.stop();
    let o = generate("famlx-test/llama", s.path(), &hub.endpoint, &[("HF_HUB_OFFLINE", "1")]);
    assert_eq!(tokens(&o), expected());
    let script = "import sys, os; from huggingface_hub import snapshot_download; \
                  p = snapshot_download(sys.argv[1], local_files_only=True); \
                  print(sorted(os.listdir(p)))";
    let o = std::process::Command::new(common::reference::python())
        .args(["-c", script, "famlx-test/llama"])
        .env("HF_HOME", &mine)
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "snapshot_download offline: {}", String::from_utf8_lossy(&o.stderr));
    assert!(listed.contains("'config.json'") && listed.contains("'model-00002-of-00002.safetensors'"), "{listed}");
}

#[test]
fn hub_failures_are_one_line() {
    let s = Scratch::new("hub-errors");
    let mut private = llama_repo();
    private.id = "famlx-test/private".into();
    private.token = Some("sekrit".into());
    let mut no_config = llama_repo();
    no_config.id = "famlx-test/noconfig".into();
    no_config.files.remove("config.json");
    let mut hub = HubServer::start(vec![llama_repo(), private, no_config]);
    let ep = hub.endpoint.clone();

    let e = fails(&generate("famlx-test/nosuch", s.path(), &ep, &[]));
    assert!(e.contains("famlx-test/nosuch") && e.contains("404"), "{e}");
    let e = fails(&generate("famlx-test/private", s.path(), &ep, &[]));
    assert!(e.contains("401") && e.contains("HF_TOKEN"), "{e}");
    let o = generate("famlx-test/private", s.path(), &ep, &[("HF_TOKEN", "sekrit")]);
    assert_eq!(tokens(&o), expected(), "HF_TOKEN is sent");
    let e = fails(&generate("famlx-test/noconfig", s.path(), &ep, &[]));
    assert!(e.contains("config.json"), "{e}");
    let mut c = famlx();
    c.args(["generate", "--model", "famlx-test/llama", "--revision", "nosuchbranch", "--prompt-ids", IDS, "--json"])
        .env("HF_HOME", s.path().join("other"))
        .env("HF_ENDPOINT", &ep)
        .env_remove("HF_HUB_OFFLINE");
    let e = fails(&c.output().unwrap());
    assert!(e.contains("nosuchbranch") && e.contains("404"), "{e}");
    // Nothing cached and nothing listening: connection refused; offline: not cached.
    hub.stop();
    let empty = s.path().join("empty");
    let e = fails(&generate("famlx-test/llama", &empty, &ep, &[]));
    assert!(e.contains("cannot reach") && e.contains(&ep), "{e}");
    let e = fails(&generate("famlx-test/llama", &empty, &ep, &[("HF_HUB_OFFLINE", "1")]));
    assert!(e.contains("not in the Hugging Face cache") && e.contains("HF_HUB_OFFLINE"), "{e}");
}

/// A scratch folder holding the cache (`home/`, as HF_HOME) and an empty
/// `sentinel/` beside it, where the hostile paths below aim.
struct Jail(Scratch);

impl Jail {
    fn new(tag: &str) -> Jail {
        let s = Scratch::new(tag);
        std::fs::create_dir(s.path().join("sentinel")).unwrap();
        Jail(s)
    }
    fn home(&self) -> PathBuf {
        self.0.path().join("home")
    }
    fn sentinel(&self) -> PathBuf {
        self.0.path().join("sentinel")
    }
    /// Nothing exists outside `home/hub` (the sentinel is empty; nothing
    /// else beside it or beside `hub`).
    fn untouched(&self) {
        let names = |d: &Path| -> Vec<String> {
            match std::fs::read_dir(d) {
                Ok(r) => r.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect(),
                Err(_) => vec![],
            }
        };
        assert!(names(&self.sentinel()).is_empty(), "written outside the cache: {:?}", names(&self.sentinel()));
        let mut top = names(self.0.path());
        top.sort();
        assert!(top == ["home", "sentinel"] || top == ["sentinel"], "{top:?}");
        assert!(names(&self.home()).iter().all(|n| n == "hub"), "{:?}", names(&self.home()));
    }
    /// The files in the llama repo's blobs folder.
    fn blobs(&self) -> Vec<String> {
        match std::fs::read_dir(self.home().join("hub/models--famlx-test--llama/blobs")) {
            Ok(r) => r.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect(),
            Err(_) => vec![],
        }
    }
}

#[test]
fn hostile_etags_commits_and_file_names_are_refused_and_nothing_lands_outside_the_cache() {
    let j = Jail::new("hub-hostile");
    let shard = "model-00001-of-00002.safetensors";
    // Repos whose index (and listing) names a shard outside the snapshot, or
    // by a path that is not plain (index_shards lets `.` parts through).
    let aims = ["../../../../sentinel/x.safetensors", "sub/./x.safetensors"];
    let evil: Vec<HubRepo> = aims
        .iter()
        .enumerate()
        .map(|(i, aim)| {
            let mut r = llama_repo();
            r.id = format!("famlx-test/evil{i}");
            let index = String::from_utf8(r.files["model.safetensors.index.json"].clone()).unwrap();
            r.files.insert("model.safetensors.index.json".into(), index.replace(shard, aim).into_bytes());
            r.files.insert(aim.to_string(), r.files[shard].clone());
            r
        })
        .collect();
    let hub = HubServer::start([vec![llama_repo()], evil].concat());
    let abs = j.sentinel().join("PWNED").display().to_string();
    let headers = [
        ("ETag", format!("\"{abs}\""), "ETag"),
        ("ETag", "\"../../../../sentinel/PWNED\"".to_string(), "ETag"),
        ("X-Linked-Etag", "W/\"../../../../sentinel/PWNED\"".to_string(), "ETag"),
        ("X-Repo-Commit", abs.clone(), "commit"),
        ("X-Repo-Commit", "../../../../sentinel".to_string(), "commit"),
        // hf-hub 0.4.3 panicked on this one.
        ("X-Repo-Commit", "../0123456789abcdef0123456789abcdef0123456".to_string(), "commit"),
        ("X-Linked-Size", "-1".to_string(), "size"),
    ];
    for (name, value, says) in headers {
        hub.state.lock().unwrap().headers = vec![(name.to_string(), value.clone())];
        let e = fails(&generate("famlx-test/llama", &j.home(), &hub.endpoint, &[]));
        assert!(e.contains("famlx-test/llama: downloading config.json") && e.contains(says), "{name}: {value}: {e}");
        j.untouched();
        assert!(j.blobs().is_empty(), "{name}: {value}: {:?}", j.blobs());
    }
    hub.state.lock().unwrap().headers.clear();
    for sha in [abs.as_str(), "../../../../sentinel", "../x", "main"] {
        hub.state.lock().unwrap().listing_sha = Some(sha.to_string());
        let before = hub.log().len();
        let e = fails(&generate("famlx-test/llama", &j.home(), &hub.endpoint, &[]));
        assert!(e.contains("the repo listing") && e.contains("commit"), "{sha}: {e}");
        assert!(
            file_gets(&hub.log()[before..]).is_empty() && !hub.log()[before..].iter().any(|l| l.starts_with("HEAD"))
        );
        j.untouched();
    }
    hub.state.lock().unwrap().listing_sha = None;
    for (i, (aim, says)) in aims.iter().zip(["leaves the checkpoint folder", "file name"]).enumerate() {
        let e = fails(&generate(&format!("famlx-test/evil{i}"), &j.home(), &hub.endpoint, &[]));
        assert!(e.contains(&format!("famlx-test/evil{i}")) && e.contains(says) && e.contains(aim), "{e}");
        j.untouched();
    }
    assert!(!hub.log().iter().any(|l| l.contains("sentinel")), "the hostile name was requested");
    // The hub behaving again: the same cache fills and serves.
    assert_eq!(tokens(&generate("famlx-test/llama", &j.home(), &hub.endpoint, &[])), expected());
    j.untouched();
}

#[test]
fn a_revision_that_is_not_a_ref_name_is_refused_before_any_request() {
    let j = Jail::new("hub-revision");
    let hub = HubServer::start(vec![llama_repo()]);
    let abs = j.sentinel().join("x").display().to_string();
    for rev in ["../../x", "../../../../sentinel/x", abs.as_str(), "a//b", "main/../../x", "x\\y", ".git", ""] {
        for offline in ["0", "1"] {
            let mut c = famlx();
            c.args(["generate", "--model", "famlx-test/llama", "--revision", rev, "--prompt-ids", IDS])
                .env("HF_HOME", j.home())
                .env("HF_ENDPOINT", &hub.endpoint)
                .env("HF_HUB_OFFLINE", offline);
            let e = fails(&c.output().unwrap());
            assert!(e.contains("--revision") && e.contains("revision"), "{rev:?}: {e}");
        }
    }
    assert!(hub.log().is_empty(), "{:#?}", hub.log());
    j.untouched();
    assert!(!j.home().exists(), "the cache was touched");
}

#[test]
fn a_redirect_loop_ends_in_one_line_within_seconds() {
    let j = Jail::new("hub-redirect");
    let hub = HubServer::start(vec![llama_repo()]);
    hub.state.lock().unwrap().redirect_loop = true;
    let t = Instant::now();
    let e = fails(&generate("famlx-test/llama", &j.home(), &hub.endpoint, &[]));
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    assert!(e.contains("config.json") && e.contains("more than 10 redirects"), "{e}");
    let asked = hub.log().iter().filter(|l| l.contains("/resolve/")).count();
    assert!(asked <= 12, "{asked} requests");
    j.untouched();
}

#[test]
fn a_body_longer_than_announced_is_refused_and_nothing_is_kept() {
    let j = Jail::new("hub-long");
    let hub = HubServer::start(vec![llama_repo()]);
    let shard = "model-00001-of-00002.safetensors";
    let data = std::fs::read(fixture("llama-hf-bf16").join(shard)).unwrap();
    let on_disk = || -> u64 {
        let dir = j.home().join("hub/models--famlx-test--llama/blobs");
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum()
    };
    // No Content-Length, and zeros after the file until the client hangs up.
    hub.state.lock().unwrap().body = Some((shard.into(), Body::Endless));
    let e = fails(&generate("famlx-test/llama", &j.home(), &hub.endpoint, &[]));
    assert!(e.contains(shard) && e.contains(&format!("more than the {} bytes", data.len())), "{e}");
    let blobs = j.blobs();
    assert!(!blobs.contains(&etag_of(&data)) && !blobs.iter().any(|b| b.ends_with(".incomplete")), "{blobs:?}");
    // The other files came (config, index, tokenizer): only they are on disk.
    assert!(on_disk() < 1 << 20, "{} bytes on disk", on_disk());
    // A Content-Length past the announced size is refused before any byte.
    hub.state.lock().unwrap().body = Some((shard.into(), Body::Claims(4 << 30)));
    let e = fails(&generate("famlx-test/llama", &j.home(), &hub.endpoint, &[]));
    assert!(e.contains(shard) && e.contains("4294967296") && e.contains(&data.len().to_string()), "{e}");
    assert!(!j.blobs().iter().any(|b| b.ends_with(".incomplete")), "{:?}", j.blobs());
    j.untouched();
    hub.state.lock().unwrap().body = None;
    assert_eq!(tokens(&generate("famlx-test/llama", &j.home(), &hub.endpoint, &[])), expected());
}

#[test]
fn a_stalled_or_trickling_hub_times_out() {
    let j = Jail::new("hub-stall");
    let hub = HubServer::start(vec![llama_repo()]);
    let shard = "model-00001-of-00002.safetensors";
    let quick = [("FAMLX_HUB_TIMEOUT_SECS", "1")];
    hub.state.lock().unwrap().body = Some((shard.into(), Body::Stall));
    let t = Instant::now();
    let e = fails(&generate("famlx-test/llama", &j.home(), &hub.endpoint, &quick));
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert!(e.contains(shard) && e.contains("FAMLX_HUB_TIMEOUT_SECS"), "{e}");
    // A listing that trickles is given up on as well.
    hub.state.lock().unwrap().body = None;
    hub.state.lock().unwrap().slow_listing = true;
    let t = Instant::now();
    let e = fails(&generate("famlx-test/llama", &j.home(), &hub.endpoint, &quick));
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert!(e.contains("listing") && e.contains("FAMLX_HUB_TIMEOUT_SECS"), "{e}");
    for bad in ["0", "-1", "soon", "1e9"] {
        let e = fails(&generate("famlx-test/llama", &j.home(), &hub.endpoint, &[("FAMLX_HUB_TIMEOUT_SECS", bad)]));
        assert!(e.contains("FAMLX_HUB_TIMEOUT_SECS"), "{e}");
    }
    j.untouched();
}
