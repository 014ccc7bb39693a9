//! An out-of-tree plugin: the template under examples/family-template is
//! built in a temporary directory against plugin-api only (its own workspace,
//! its own target dir), dropped into a plugin directory, and serves a
//! checkpoint whose model_type only it claims — with no host rebuild. Its
//! greedy tokens must equal mlx-lm's on the same (llama-architecture) weights.

use std::path::{Path, PathBuf};
use std::process::Command;

fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let name = e.file_name();
        if name == "target" || name == "Cargo.lock" {
            continue;
        }
        let to = dst.join(&name);
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to);
        } else {
            std::fs::copy(e.path(), to).unwrap();
        }
    }
}

#[test]
fn template_plugin_builds_out_of_tree_and_serves_its_checkpoint() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().unwrap();
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let src = tmp.join("oot-src");
    let _ = std::fs::remove_dir_all(&src);
    copy_dir(&root.join("examples/family-template"), &src);
    let manifest = src.join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let api = root.join("plugin-api");
    std::fs::write(&manifest, text.replace("../../plugin-api", &api.to_string_lossy())).unwrap();

    // Its own target dir (kept between runs to save time), so no lock is shared
    // with the cargo running this test.
    let target = tmp.join("oot-target");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["build", "--quiet"])
        .current_dir(&src)
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .unwrap();
    assert!(out.status.success(), "template build failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let lib = target.join("debug/libfamlx_plugin_mytiny.so");
    assert!(lib.exists());

    let plugins = tmp.join("oot-plugins");
    let model = tmp.join("oot-model");
    let _ = std::fs::remove_dir_all(&plugins);
    let _ = std::fs::remove_dir_all(&model);
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::copy(&lib, plugins.join("libfamlx_plugin_mytiny.so")).unwrap();
    let fixture = root.join("fixtures/llama-tied-f32");
    copy_dir(&fixture, &model);
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture.join("config.json")).unwrap()).unwrap();
    cfg["model_type"] = "mytiny".into();
    std::fs::write(model.join("config.json"), cfg.to_string()).unwrap();

    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture.join("expected.json")).unwrap()).unwrap();
    let prompt = &expected["prompts"][1];
    let ids: Vec<String> = prompt["ids"].as_array().unwrap().iter().map(|v| v.to_string()).collect();
    let want: Vec<u64> = prompt["greedy"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();

    let out = Command::new(env!("CARGO_BIN_EXE_famlx"))
        .args(["generate", "--json", "--max-tokens", "24", "--prefill-step-size", "16", "--prompt-ids", &ids.join(",")])
        .arg("--plugin-dir")
        .arg(&plugins)
        .arg("--model")
        .arg(&model)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let line = String::from_utf8_lossy(&out.stdout).lines().last().unwrap().to_string();
    let got: serde_json::Value = serde_json::from_str(&line).unwrap();
    let tokens: Vec<u64> = got["tokens"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    // Generation stops at an EOS token, mlx-lm's recording does not.
    assert!(!tokens.is_empty());
    assert_eq!(tokens[..], want[..tokens.len()], "out-of-tree plugin disagrees with mlx-lm");
    assert!(tokens.len() == want.len() || got["finish_reason"] == "stop");
}
