//! Hot reload end to end: `famlx generate --watch` serves a checkpoint with a
//! plugin; a broken build dropped in is refused while the old plugin keeps
//! serving; a rebuilt plugin with an observable change is swapped in and the
//! next answer shows it — with the checkpoint's weights gone from disk, so
//! they can only have come from memory.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

fn deps_dir() -> PathBuf {
    std::env::current_exe().unwrap().parent().unwrap().to_path_buf()
}

fn test_plugin(name: &str) -> PathBuf {
    let p = deps_dir().join(format!("libfamlx_testplugin_{name}.so"));
    assert!(p.exists(), "{} not built (it is a dev-dependency of famlx)", p.display());
    p
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("famlx-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Replaces `dst` atomically, the way a linker or `cargo build` does.
fn drop_in(src_bytes: &[u8], dst: &Path) {
    let tmp = dst.with_extension("partial");
    std::fs::write(&tmp, src_bytes).unwrap();
    std::fs::rename(&tmp, dst).unwrap();
}

fn lines(r: impl std::io::Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for l in BufReader::new(r).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    rx
}

fn wait_for(rx: &Receiver<String>, what: &str, pred: impl Fn(&str) -> bool, seen: &mut Vec<String>) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Ok(l) = rx.recv_timeout(Duration::from_millis(200)) {
            seen.push(l.clone());
            if pred(&l) {
                return l;
            }
        }
    }
    panic!("timed out waiting for {what}; saw: {seen:#?}");
}

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn rebuilt_plugin_is_swapped_in_and_broken_one_refused() {
    let root = env!("CARGO_MANIFEST_DIR");
    let plugins = scratch("reload-plugins");
    let model = scratch("reload-model");
    let target = plugins.join("libfamlx_plugin_reloadtest.so");
    std::fs::copy(test_plugin("reload_a"), &target).unwrap();
    let fixture = Path::new(root).join("../fixtures/llama-tied-f32");
    for f in ["model.safetensors", "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(fixture.join(f), model.join(f)).unwrap();
    }
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture.join("config.json")).unwrap()).unwrap();
    cfg["model_type"] = "reloadtest".into();
    std::fs::write(model.join("config.json"), cfg.to_string()).unwrap();

    let mut child = Command::new(env!("CARGO_BIN_EXE_famlx"))
        .args(["generate", "--watch", "--json", "--max-tokens", "6", "--prompt-ids", "1,2,3,4"])
        .arg("--plugin-dir")
        .arg(&plugins)
        .arg("--model")
        .arg(&model)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = lines(child.stdout.take().unwrap());
    let err = lines(child.stderr.take().unwrap());
    let _guard = Kill(child);
    let (mut so, mut se) = (Vec::new(), Vec::new());

    let first: serde_json::Value =
        serde_json::from_str(&wait_for(&out, "first answer", |l| l.starts_with('{'), &mut so)).unwrap();
    let first_tokens: Vec<u64> = first["tokens"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    assert_eq!(first_tokens.len(), 6);
    assert!(first_tokens.iter().any(|&t| t != 7), "build A must not be biased: {first_tokens:?}");

    // From here on, weights can only come from memory.
    std::fs::remove_file(model.join("model.safetensors")).unwrap();

    // A broken build: refused, the old plugin keeps serving.
    drop_in(b"this is not a shared library", &target);
    let msg = wait_for(&err, "failed reload", |l| l.contains("reload") && l.contains("failed"), &mut se);
    assert!(msg.contains("keeping the old plugin"), "{msg}");

    // The rebuilt plugin: swapped in, next answer shows the change.
    drop_in(&std::fs::read(test_plugin("reload_b")).unwrap(), &target);
    let msg = wait_for(&err, "reload", |l| l.contains("reloaded `reloadtest`"), &mut se);
    assert!(msg.contains(" ms "), "{msg}");
    let second: serde_json::Value =
        serde_json::from_str(&wait_for(&out, "second answer", |l| l.starts_with('{'), &mut so)).unwrap();
    let tokens: Vec<u64> = second["tokens"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    assert_eq!(tokens, vec![7; 6], "build B favours token 7");

    // Loading reads the file; that must not count as another rebuild.
    std::thread::sleep(Duration::from_millis(800));
    let again: Vec<String> = err.try_iter().filter(|l| l.contains("reloaded")).collect();
    assert!(again.is_empty(), "reloaded again without a change: {again:?}");
}
