//! An out-of-tree plugin: `famlx plugin new` writes a new family (the
//! template, with the plugin SDK vendored) into a temporary folder; it builds
//! there on its own (its own workspace and target dir, no path into this
//! repository), is dropped into a plugin directory and serves a checkpoint
//! whose model_type only it claims, with no host rebuild. Its greedy tokens
//! must equal mlx-lm's on the same (llama-architecture) weights.

use std::path::PathBuf;
use std::process::Command;

fn famlx() -> Command {
    Command::new(env!("CARGO_BIN_EXE_famlx"))
}

#[test]
fn plugin_new_builds_out_of_tree_and_serves_its_checkpoint() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().unwrap();
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let src = tmp.join("oot-src");
    let _ = std::fs::remove_dir_all(&src);

    let out = famlx().args(["plugin", "new", "tiny_fam", "--dir"]).arg(&src).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let manifest = std::fs::read_to_string(src.join("Cargo.toml")).unwrap();
    assert!(manifest.contains("name = \"famlx-plugin-tiny_fam\""), "{manifest}");
    assert!(manifest.contains(&format!("version = \"={}\"", plugin_api::SDK_VERSION)), "SDK not pinned: {manifest}");
    assert!(!manifest.contains(&root.to_string_lossy().to_string()), "depends on this repository: {manifest}");
    assert!(src.join("sdk/plugin-api/CHANGELOG.md").is_file() && src.join("sdk/mlx-sys/csrc/shim.cpp").is_file());
    // A second time into the same folder is refused, naming it.
    let again = famlx().args(["plugin", "new", "tiny_fam", "--dir"]).arg(&src).output().unwrap();
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(!again.status.success() && err.contains("already exists"), "{err}");
    let bad = famlx().args(["plugin", "new", "Tiny-Fam"]).output().unwrap();
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("plugin name `Tiny-Fam`"));

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
    assert!(out.status.success(), "plugin build failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let lib = target.join("debug/libfamlx_plugin_tiny_fam.so");
    assert!(lib.exists());

    let plugins = tmp.join("oot-plugins");
    let model = tmp.join("oot-model");
    let _ = std::fs::remove_dir_all(&plugins);
    let _ = std::fs::remove_dir_all(&model);
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::copy(&lib, plugins.join("libfamlx_plugin_tiny_fam.so")).unwrap();
    let fixture = root.join("fixtures/llama-tied-f32");
    std::fs::create_dir_all(&model).unwrap();
    for e in std::fs::read_dir(&fixture).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), model.join(e.file_name())).unwrap();
    }
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture.join("config.json")).unwrap()).unwrap();
    cfg["model_type"] = "tiny_fam".into();
    std::fs::write(model.join("config.json"), cfg.to_string()).unwrap();

    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture.join("expected.json")).unwrap()).unwrap();
    let prompt = &expected["prompts"][1];
    let ids: Vec<String> = prompt["ids"].as_array().unwrap().iter().map(|v| v.to_string()).collect();
    let want: Vec<u64> = prompt["greedy"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();

    let out = famlx()
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

/// Names whose generated code could not compile are refused, one line
/// naming them, nothing written: a Rust keyword, or a type name (`self_` →
/// `Self`, `array` → `Array`, `model_plan` → `ModelPlan`) that is a keyword,
/// a prelude name or one the template already uses. Other names scaffold,
/// each replaced whole (`xmytiny` contains the template's own name).
#[test]
fn plugin_new_refuses_names_its_code_cannot_take() {
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("oot-names-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    for (name, says) in [
        ("self", "a Rust keyword"),
        ("self_", "`Self`, a Rust keyword"),
        ("fn", "a Rust keyword"),
        ("array", "`Array`, a name the plugin's code already uses"),
        ("model_plan", "`ModelPlan`, a name the plugin's code already uses"),
        ("config", "`Config`, a name the plugin's code already uses"),
        ("vec", "`Vec`, a name of Rust's prelude"),
        ("result", "`Result`"),
    ] {
        let dir = tmp.join(name);
        let out = famlx().args(["plugin", "new", name, "--dir"]).arg(&dir).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{name}: {err}");
        assert!(err.starts_with(&format!("famlx: error: plugin name `{name}`")) && err.contains(says), "{name}: {err}");
        assert!(!dir.exists(), "{name}: wrote {}", dir.display());
    }
    for (name, ty) in [("phi3", "Phi3"), ("xmytiny", "Xmytiny"), ("array_lm", "ArrayLm")] {
        let dir = tmp.join(name);
        let out = famlx().args(["plugin", "new", name, "--dir"]).arg(&dir).output().unwrap();
        assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        let lib = std::fs::read_to_string(dir.join("src/lib.rs")).unwrap();
        assert!(lib.contains(&format!("pub struct {ty};")), "{name}: {lib}");
        assert!(lib.contains(&format!("export_plugin!(\"famlx-plugin-{name}\", [{ty}]);")), "{name}: {lib}");
        assert!(lib.contains(&format!("&[\"{name}\"]")) && !lib.contains("mytiny\"") || name == "xmytiny", "{lib}");
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        assert!(manifest.contains(&format!("name = \"famlx_plugin_{name}\"")), "{manifest}");
    }
    let _ = std::fs::remove_dir_all(&tmp);
}
