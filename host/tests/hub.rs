//! `--model org/name` against a hub stand-in on 127.0.0.1
//! (tests/common/hub_server.rs), started and stopped by each test: only the
//! files a checkpoint needs are fetched into the standard cache layout, a
//! cut download resumes, a filled cache (famlx's or Python
//! huggingface_hub's) is reused, offline mode, and one clear line for each
//! failure.

mod common;

use common::hub_server::{HubRepo, HubServer};
use common::{famlx, fixture, json_of, texts, Scratch};
use std::path::Path;
use std::process::Output;

const IDS: &str = "1,5,9,33,70,2,101,7";

/// `famlx generate --model REPO` with the hub at `endpoint` and the cache in `home`.
fn generate(repo: &str, home: &Path, endpoint: &str, env: &[(&str, &str)]) -> Output {
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

fn tokens(o: &Output) -> serde_json::Value {
    json_of(o)["tokens"].clone()
}

fn fails(o: &Output) -> String {
    let (out, err) = texts(o);
    assert!(!o.status.success(), "should have failed:\n{out}\n{err}");
    assert!(!err.contains("panicked"), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one error line: {err}");
    err
}

fn llama_repo() -> HubRepo {
    // An extra weights file the checkpoint does not need is never fetched.
    HubRepo::from_dir("famlx-test/llama", &fixture("llama-hf-bf16"), &[("pytorch_model.bin", b"not needed")])
}

fn expected() -> serde_json::Value {
    let o = famlx()
        .args(["generate", "--model"])
        .arg(fixture("llama-hf-bf16"))
        .args(["--prompt-ids", IDS, "--max-tokens", "6", "--json"])
        .output()
        .unwrap();
    tokens(&o)
}

fn file_gets(log: &[String]) -> Vec<String> {
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
    for f in ["config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors", "tokenizer.json"] {
        assert!(log.iter().any(|l| l.contains(&format!("/resolve/main/{f}"))), "{f} not fetched: {log:#?}");
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
