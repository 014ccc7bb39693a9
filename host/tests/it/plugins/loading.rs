//! Plugin loading: several plugins from one folder, refusals (wrong ABI, wrong
//! MLX, a family with no model_type, not a plugin, no root module; files the
//! dynamic loader must never see: truncated, a FIFO, another machine's, a
//! version stamp that is data) with a reason, `--plugin-dir`s that are not
//! folders, and a panicking plugin and one returning wrongly shaped logits
//! contained, with the other plugins still serving.

use crate::common;

use common::{cdylib, expected, fixture, fixture_copy, ids, mlx_lock, registry, texts, Scratch};
use famlx::cache::CacheOptions;
use famlx::decode::{generate, GenParams};
use famlx::model::LoadedModel;
use famlx::plugins::{load_plugin, plugin_pattern, Registry};
use plugin_api::ABI_VERSION;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Copies the cdylib `lib` into `dir` under the plugin name `libfamlx_plugin_<as_name>.so`.
fn install(lib: &str, dir: &Path, as_name: &str) -> PathBuf {
    let (pre, suf) = plugin_pattern();
    let dst = dir.join(format!("{pre}{as_name}{suf}"));
    std::fs::copy(cdylib(lib), &dst).unwrap();
    dst
}

/// `famlx plugins` with only `dirs` added (no FAMLX_PLUGIN_PATH).
fn famlx_plugins(dirs: &[&Path]) -> (bool, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_famlx"));
    c.arg("plugins").env_remove("FAMLX_PLUGIN_PATH");
    for d in dirs {
        c.arg("--plugin-dir").arg(d);
    }
    let o = c.output().unwrap();
    let (out, err) = texts(&o);
    assert!(!err.contains("panicked at"), "famlx plugins panicked: {err}");
    (o.status.success(), out, err)
}

/// The section of `famlx plugins` output that starts at `header`.
fn section<'a>(out: &'a str, header: &str) -> &'a str {
    let start = out.find(header).unwrap_or_else(|| panic!("no `{header}` in:\n{out}"));
    let rest = &out[start + header.len()..];
    let end = ["\nloaded:", "\nrefused:", "\nwarning:"].iter().filter_map(|h| rest.find(h)).min().unwrap_or(rest.len());
    &rest[..end]
}

#[test]
fn two_plugins_from_one_folder() {
    let dir = Scratch::new("two-plugins");
    let llama = install("famlx_plugin_llama", dir.path(), "llama");
    let qwen3 = install("famlx_plugin_qwen3", dir.path(), "qwen3");

    // Library: exactly these two, each with its family.
    let reg = Registry::discover(&[dir.path().to_path_buf()]);
    assert!(reg.refused.is_empty(), "refused: {:?}", reg.refused);
    assert!(reg.warnings.is_empty(), "warnings: {:?}", reg.warnings);
    let got: Vec<(String, PathBuf)> = reg.plugins.iter().map(|p| (p.name.clone(), p.path.clone())).collect();
    assert_eq!(
        got,
        vec![("famlx-plugin-llama".to_string(), llama.clone()), ("famlx-plugin-qwen3".to_string(), qwen3.clone())]
    );
    assert_eq!(reg.resolve("llama", None).unwrap().plugin_path, llama);
    assert_eq!(reg.resolve("qwen3", None).unwrap().plugin_path, qwen3);
    let e = reg.resolve("gemma4", None).err().expect("gemma4 is not claimed").to_string();
    assert!(e.contains("gemma4") && e.contains("llama") && e.contains("qwen3"), "{e}");

    // Binary: `famlx plugins --plugin-dir DIR` lists both, loaded from DIR
    // (the first directory wins over copies found later on the search path).
    let (ok, out, err) = famlx_plugins(&[dir.path()]);
    assert!(ok, "famlx plugins failed: {err}");
    let loaded = section(&out, "loaded:");
    for (name, fam, path) in [("famlx-plugin-llama", "llama", &llama), ("famlx-plugin-qwen3", "qwen3", &qwen3)] {
        assert!(
            loaded.contains(&format!("{name} ({})", path.display())),
            "{name} from {} not listed:\n{out}",
            path.display()
        );
        assert!(loaded.contains(&format!("family {fam}: model types {fam}")), "family {fam} not listed:\n{out}");
    }
}

#[test]
fn plugins_from_a_copied_folder_run_models() {
    // The copies are separate library images; models built through them work.
    let _g = mlx_lock();
    let dir = Scratch::new("copied-plugins");
    install("famlx_plugin_llama", dir.path(), "llama");
    install("famlx_plugin_qwen3", dir.path(), "qwen3");
    let reg = Registry::discover(&[dir.path().to_path_buf()]);
    for variant in ["llama-bf16", "qwen3-bf16"] {
        let mut m = LoadedModel::load(&fixture(variant), &reg, None, CacheOptions::default()).unwrap();
        assert!(m.family.plugin_path.starts_with(dir.path()));
        let p = &expected(variant)["prompts"][1];
        let want = ids(&p["greedy"]);
        let params = GenParams { max_tokens: 8, prefill_step: 16, ..Default::default() };
        let mut seq = m.sequence().unwrap();
        let got = generate(&mut m, &mut seq, &ids(&p["ids"]), &params, |_| true).unwrap().tokens;
        assert_eq!(got, want[..8], "{variant}");
    }
}

#[test]
fn wrong_abi_version_is_refused_naming_both_versions() {
    let dir = Scratch::new("bad-abi");
    let bad = install("famlx_testplugin_bad_abi", dir.path(), "badabi");
    let theirs = format!("plugin ABI version {}", ABI_VERSION + 1);
    let ours = format!("host's ABI version {ABI_VERSION}");
    for fresh in [false, true] {
        let e = load_plugin(&bad, fresh).err().expect("a wrong ABI must be refused").to_string();
        assert!(e.contains(&theirs) && e.contains(&ours), "{e}");
        assert!(e.starts_with(&bad.display().to_string()), "the message names the file: {e}");
        assert!(!e.contains('\n'), "one line: {e}");
    }

    // Next to good plugins: refused, the others still load.
    install("famlx_plugin_llama", dir.path(), "llama");
    let reg = Registry::discover(&[dir.path().to_path_buf()]);
    assert_eq!(reg.plugins.len(), 1, "only llama loads");
    assert_eq!(reg.plugins[0].name, "famlx-plugin-llama");
    assert_eq!(reg.refused.len(), 1);
    assert_eq!(reg.refused[0].path, bad);
    assert!(reg.refused[0].reason.contains(&theirs), "{}", reg.refused[0].reason);

    let (ok, out, err) = famlx_plugins(&[dir.path()]);
    assert!(ok, "famlx plugins failed: {err}");
    let refused = section(&out, "refused:");
    assert!(
        refused.contains(&bad.display().to_string()) && refused.contains(&theirs) && refused.contains(&ours),
        "{out}"
    );
}

#[test]
fn panicking_build_is_an_error_and_the_host_keeps_running() {
    let _g = mlx_lock();
    let dir = Scratch::new("panicky");
    let so = install("famlx_testplugin_panicky", dir.path(), "panicky");
    let p = load_plugin(&so, false).unwrap();
    assert_eq!(p.name, "famlx-testplugin-panicky");
    let reg = Registry { plugins: vec![p], ..Default::default() };

    // A checkpoint claiming `model_type: panicky`: real weights, edited config.
    let ck = fixture_copy("llama-tied-f32");
    let cfg_path = ck.path().join("config.json");
    let mut cfg: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&cfg_path).unwrap()).unwrap();
    cfg["model_type"] = "panicky".into();
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();

    for _ in 0..2 {
        let e = LoadedModel::load(ck.path(), &reg, None, CacheOptions::default())
            .err()
            .expect("a panicking build must be an error");
        let e = format!("{e:#}");
        assert!(e.contains("panic in panicky") && e.contains(famlx_testplugin_panicky_msg()), "{e}");
        assert!(e.contains("build"), "{e}");
    }

    // The same process goes on to load and run the real llama fixture.
    let reg = registry();
    let mut m = LoadedModel::load(&fixture("llama-bf16"), &reg, None, CacheOptions::default()).unwrap();
    let p = &expected("llama-bf16")["prompts"][2];
    let params = GenParams { max_tokens: 24, prefill_step: 16, ..Default::default() };
    let mut seq = m.sequence().unwrap();
    let got = generate(&mut m, &mut seq, &ids(&p["ids"]), &params, |_| true).unwrap().tokens;
    assert_eq!(got, ids(&p["greedy"]));

    // Through the binary: a one-line error and exit status 1, not an abort.
    let o = Command::new(env!("CARGO_BIN_EXE_famlx"))
        .args(["generate", "--prompt-ids", "1,2,3", "--max-tokens", "2", "--model"])
        .arg(ck.path())
        .arg("--plugin-dir")
        .arg(dir.path())
        .env_remove("FAMLX_PLUGIN_PATH")
        .output()
        .unwrap();
    let (_, err) = texts(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let last = err.lines().last().unwrap_or_default();
    assert!(last.starts_with("famlx: error:") && last.contains("panic in panicky"), "{err}");
}

/// The panicky plugin's message (kept in sync with plugins/testing/panicky).
fn famlx_testplugin_panicky_msg() -> &'static str {
    "panicky plugin: build always panics"
}

/// Compiles a C shared library, exporting the famlx stamps when `stamps`.
fn c_library(dir: &Path, name: &str, stamps: bool) -> PathBuf {
    let code = if stamps {
        format!(
            "unsigned int famlx_plugin_abi_version(void) {{ return {ABI_VERSION}; }}\n\
             const char *famlx_plugin_mlx_version(void) {{ return {:?}; }}\n",
            mlx::build_version()
        )
    } else {
        "int not_a_plugin(void) { return 42; }\n".to_string()
    };
    c_code_library(dir, name, &code)
}

/// Compiles the C source `code` into a shared library named like a plugin.
fn c_code_library(dir: &Path, name: &str, code: &str) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, code).unwrap();
    let (pre, suf) = plugin_pattern();
    let out = dir.join(format!("{pre}{name}{suf}"));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let st = Command::new(&cc).args(["-shared", "-fPIC", "-o"]).arg(&out).arg(&src).status();
    assert!(st.is_ok_and(|s| s.success()), "{cc} could not build {}", src.display());
    std::fs::remove_file(&src).unwrap();
    out
}

#[test]
fn non_plugins_are_refused_with_a_reason() {
    let dir = Scratch::new("not-plugins");
    let (pre, suf) = plugin_pattern();
    // Not a library at all.
    let junk = dir.path().join(format!("{pre}junk{suf}"));
    std::fs::write(&junk, b"this is not an ELF file").unwrap();
    // A real library without the famlx stamps.
    let plain = c_library(dir.path(), "plain", false);
    // Right stamps, but no abi_stable root module.
    let rootless = c_library(dir.path(), "rootless", true);

    let reason = |p: &Path| load_plugin(p, false).err().expect("must be refused").to_string();
    let e = reason(&junk);
    assert!(e.starts_with(&junk.display().to_string()) && e.contains("not a shared library (no ELF header)"), "{e}");
    let e = reason(&plain);
    assert!(e.contains("not a famlx plugin") && e.contains("famlx_plugin_abi_version"), "{e}");
    let e = reason(&rootless);
    assert!(e.starts_with(&rootless.display().to_string()), "{e}");
    assert!(e.contains("not a famlx plugin") && e.contains("no root module"), "names what is missing: {e}");

    let reg = Registry::discover(&[dir.path().to_path_buf()]);
    assert!(reg.plugins.is_empty());
    let mut refused: Vec<&Path> = reg.refused.iter().map(|r| r.path.as_path()).collect();
    refused.sort();
    let mut want = vec![junk.as_path(), plain.as_path(), rootless.as_path()];
    want.sort();
    assert_eq!(refused, want);
    assert!(reg.refused.iter().all(|r| !r.reason.is_empty() && !r.reason.contains('\n')), "{:?}", reg.refused);

    // The CLI lists them as refused and still succeeds.
    let (ok, out, err) = famlx_plugins(&[dir.path()]);
    assert!(ok, "{err}");
    let refused = section(&out, "refused:");
    for p in want {
        assert!(refused.contains(&p.display().to_string()), "{} not listed as refused:\n{out}", p.display());
    }
}

/// Runs the real llama fixture through `reg` and checks its greedy tokens.
fn llama_still_serves(reg: &Registry) {
    let mut m = LoadedModel::load(&fixture("llama-bf16"), reg, None, CacheOptions::default()).unwrap();
    let p = &expected("llama-bf16")["prompts"][1];
    let params = GenParams { max_tokens: 8, prefill_step: 16, ..Default::default() };
    let mut seq = m.sequence().unwrap();
    let got = generate(&mut m, &mut seq, &ids(&p["ids"]), &params, |_| true).unwrap().tokens;
    assert_eq!(got, ids(&p["greedy"])[..8]);
}

/// Discovers `dir` (holding `bad` and a copy of the llama plugin): `bad` is
/// refused with a reason containing every one of `want`, llama loads and serves.
fn refused_next_to_llama(dir: &Path, bad: &Path, want: &[&str]) {
    let llama = install("famlx_plugin_llama", dir, "llama");
    let reg = Registry::discover(&[dir.to_path_buf()]);
    assert_eq!(reg.refused.len(), 1, "refused: {:?}", reg.refused);
    assert_eq!(reg.refused[0].path, bad);
    let reason = &reg.refused[0].reason;
    assert!(want.iter().all(|w| reason.contains(w)), "want {want:?} in: {reason}");
    assert!(reason.starts_with(&bad.display().to_string()), "the reason names the file: {reason}");
    assert!(!reason.contains('\n'), "one line: {reason}");
    let got: Vec<(&str, &Path)> = reg.plugins.iter().map(|p| (p.name.as_str(), p.path.as_path())).collect();
    assert_eq!(got, vec![("famlx-plugin-llama", llama.as_path())], "only llama loads");
    assert_eq!(reg.resolve("llama", None).unwrap().plugin_path, llama);

    let _g = mlx_lock();
    llama_still_serves(&reg);
}

#[test]
fn wrong_mlx_version_is_refused_naming_both_versions() {
    let dir = Scratch::new("mlx-mismatch");
    let bad = install("famlx_testplugin_mlx_mismatch", dir.path(), "mlxmismatch");
    let theirs = "plugin built against MLX 0.0.1";
    let ours = format!("host uses MLX {}", mlx::build_version());
    assert_ne!(mlx::build_version(), "0.0.1");
    let e = load_plugin(&bad, false).err().expect("another MLX must be refused").to_string();
    assert!(e.contains(theirs) && e.contains(&ours), "{e}");
    refused_next_to_llama(dir.path(), &bad, &[theirs, &ours]);
}

#[test]
fn family_without_model_types_is_refused_naming_it() {
    let dir = Scratch::new("no-model-type");
    let bad = install("famlx_testplugin_no_model_type", dir.path(), "nomodeltype");
    let e = load_plugin(&bad, false).err().expect("a family without model types must be refused").to_string();
    assert!(e.contains("family `nomodeltype` claims no model_type"), "{e}");
    refused_next_to_llama(dir.path(), &bad, &["family `nomodeltype`", "no model_type"]);
}

#[test]
fn wrong_logits_shape_is_an_error_and_the_host_keeps_running() {
    let _g = mlx_lock();
    let dir = Scratch::new("wrong-shape");
    let so = install("famlx_testplugin_wrong_shape", dir.path(), "wrongshape");
    let p = load_plugin(&so, false).unwrap();
    assert_eq!(p.name, "famlx-testplugin-wrong-shape");
    let reg = Registry { plugins: vec![p], ..Default::default() };

    // A checkpoint claiming `model_type: wrongshape`: real weights, edited config.
    let ck = fixture_copy("llama-tied-f32");
    let cfg_path = ck.path().join("config.json");
    let mut cfg: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&cfg_path).unwrap()).unwrap();
    cfg["model_type"] = "wrongshape".into();
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
    let vocab = cfg["vocab_size"].as_i64().unwrap();

    // Loading works; generating is an error naming the plugin and both shapes.
    let mut m = LoadedModel::load(ck.path(), &reg, None, CacheOptions::default()).unwrap();
    assert_eq!(m.family.plugin_path, so);
    let params = GenParams { max_tokens: 4, prefill_step: 16, ..Default::default() };
    let mut seq = m.sequence().unwrap();
    for _ in 0..2 {
        let e = generate(&mut m, &mut seq, &[1, 2, 3, 4], &params, |_| true)
            .expect_err("a wrong logits shape must be an error");
        let e = format!("{e:#}");
        assert!(e.contains("wrongshape plugin"), "names the plugin: {e}");
        assert!(e.contains(&format!("shape [1, 1, {}]", vocab - 1)), "names the shape returned: {e}");
        assert!(e.contains(&format!("expected [1, 1, {vocab}]")), "names the shape expected: {e}");
    }
    drop(m);

    // The same process goes on to load and run the real llama fixture.
    llama_still_serves(&registry());
}

/// `famlx ARGS` with FAMLX_PLUGIN_PATH unset, killed (and the test failed)
/// if it runs past `limit`: a FIFO opened as a plugin would block it for
/// ever. Returns (exit code, stdout, stderr); a signal fails the test.
fn famlx_bounded(args: &[&str], dirs: &[&Path], limit: Duration) -> (i32, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_famlx"));
    c.args(args).env_remove("FAMLX_PLUGIN_PATH").stdout(Stdio::piped()).stderr(Stdio::piped());
    for d in dirs {
        c.arg("--plugin-dir").arg(d);
    }
    let mut child = c.spawn().unwrap();
    let read = |r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::BufReader::new(r).read_to_string(&mut s);
            s
        })
    };
    use std::io::Read;
    let (out, err) = (read(Box::new(child.stdout.take().unwrap())), read(Box::new(child.stderr.take().unwrap())));
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("famlx {args:?} still ran after {limit:?} (a hang): {}", err.join().unwrap());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    assert!(!err.contains("panicked at"), "famlx {args:?} panicked: {err}");
    let code = status.code().unwrap_or_else(|| panic!("famlx {args:?} died of {status}:\n{err}"));
    (code, out, err)
}

/// The ELF machine number of another architecture than this build's, and its name.
fn foreign_machine() -> (u16, &'static str) {
    if std::env::consts::ARCH == "aarch64" {
        (62, "x86_64")
    } else {
        (183, "aarch64")
    }
}

/// `elf` (a 64-bit little-endian ELF file) with its first PT_LOAD segment
/// claiming twice the file's size: the loader would map pages past its end.
fn segment_past_the_end(mut elf: Vec<u8>) -> Vec<u8> {
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes([b[o], b[o + 1]]) as usize;
    let phoff = u64::from_le_bytes(elf[0x20..0x28].try_into().unwrap()) as usize;
    let (size, count) = (u16_at(&elf, 0x36), u16_at(&elf, 0x38));
    let load = (0..count).map(|i| phoff + i * size).find(|&o| elf[o..o + 4] == 1u32.to_le_bytes()).unwrap();
    let twice = (elf.len() as u64 * 2).to_le_bytes();
    elf[load + 32..load + 40].copy_from_slice(&twice);
    elf
}

/// Files named like plugins that the loader must not be handed, each with
/// what its refusal must say: built in `dir` from a real plugin.
fn broken_plugin_files(dir: &Path) -> Vec<(PathBuf, String)> {
    let (pre, suf) = plugin_pattern();
    let named = |n: &str| dir.join(format!("{pre}{n}{suf}"));
    let real = std::fs::read(cdylib("famlx_plugin_qwen3")).unwrap();
    let mut out = Vec::new();

    let truncated = named("truncated");
    std::fs::write(&truncated, &real[..4096]).unwrap();
    out.push((truncated, "truncated or damaged library (the file has 4096 bytes".to_string()));

    let segment = named("segment");
    std::fs::write(&segment, segment_past_the_end(real.clone())).unwrap();
    out.push((
        segment,
        format!("truncated: a segment needs bytes 0..{} but the file has {}", real.len() * 2, real.len()),
    ));

    let fifo = named("fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    out.push((fifo, "not a regular file (a FIFO)".to_string()));

    let folder = named("folder");
    std::fs::create_dir(&folder).unwrap();
    out.push((folder, "not a regular file (a folder)".to_string()));

    let (machine, name) = foreign_machine();
    let mut other = real.clone();
    other[18..20].copy_from_slice(&machine.to_le_bytes());
    let foreign = named("foreign");
    std::fs::write(&foreign, other).unwrap();
    out.push((foreign, format!("built for {name}, this famlx runs on {}", std::env::consts::ARCH)));

    let mlx = format!("{:?}", mlx::build_version());
    let abi_data = c_code_library(
        dir,
        "abidata",
        &format!(
            "const unsigned int famlx_plugin_abi_version = {ABI_VERSION};\n\
             const char *famlx_plugin_mlx_version(void) {{ return {mlx}; }}\n"
        ),
    );
    out.push((abi_data, "famlx_plugin_abi_version is a data symbol, not a function".to_string()));
    let mlx_data = c_code_library(
        dir,
        "mlxdata",
        &format!(
            "unsigned int famlx_plugin_abi_version(void) {{ return {ABI_VERSION}; }}\n\
             const char famlx_plugin_mlx_version[] = {mlx};\n"
        ),
    );
    out.push((mlx_data, "famlx_plugin_mlx_version is a data symbol, not a function".to_string()));
    out
}

#[test]
fn files_the_loader_must_not_see_are_refused_and_the_others_still_serve() {
    let dir = Scratch::new("broken-files");
    let bad = broken_plugin_files(dir.path());

    // The library: each refused with its reason (also when loading a fresh
    // copy, as --watch does: a FIFO is never opened to be copied).
    for (path, want) in &bad {
        for fresh in [false, true] {
            let e = load_plugin(path, fresh).err().unwrap_or_else(|| panic!("{} loaded", path.display())).to_string();
            assert!(e.starts_with(&path.display().to_string()) && e.contains(want.as_str()), "want `{want}` in: {e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
    }

    // Among good plugins: every bad file refused, llama loads and serves.
    let llama = install("famlx_plugin_llama", dir.path(), "llama");
    let reg = Registry::discover(&[dir.path().to_path_buf()]);
    let mut refused: Vec<(&Path, &str)> = reg.refused.iter().map(|r| (r.path.as_path(), r.reason.as_str())).collect();
    refused.sort();
    let mut want: Vec<&(PathBuf, String)> = bad.iter().collect();
    want.sort();
    assert_eq!(refused.len(), want.len(), "{refused:?}");
    for ((path, reason), (want_path, want_reason)) in refused.iter().zip(want) {
        assert_eq!(path, want_path);
        assert!(reason.contains(want_reason.as_str()), "want `{want_reason}` in: {reason}");
    }
    assert_eq!(reg.resolve("llama", None).unwrap().plugin_path, llama);
    {
        let _g = mlx_lock();
        llama_still_serves(&reg);
    }

    // The binary: `famlx plugins` lists each as refused and succeeds; a
    // model of a family that loaded still runs, each bad file named once in
    // a one-line warning. Never a signal, never a hang.
    let limit = Duration::from_secs(60);
    let (code, out, err) = famlx_bounded(&["plugins"], &[dir.path()], limit);
    assert_eq!(code, 0, "{err}");
    let listed = section(&out, "refused:");
    for (path, reason) in &bad {
        let line = listed.lines().find(|l| l.contains(&path.display().to_string()));
        assert!(
            line.is_some_and(|l| l.contains(reason.as_str())),
            "{} not refused with `{reason}`:\n{out}",
            path.display()
        );
    }
    assert!(section(&out, "loaded:").contains("famlx-plugin-llama"), "{out}");
    let m = fixture("llama-bf16").display().to_string();
    let args = ["generate", "--model", &m, "--prompt-ids", "1,2,3", "--max-tokens", "2", "--json"];
    let (code, out, err) = famlx_bounded(&args, &[dir.path()], limit);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"tokens\""), "{out}");
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("refused plugin")).collect();
    assert_eq!(warnings.len(), bad.len(), "{err}");
    for (path, reason) in &bad {
        let named: Vec<&&str> = warnings.iter().filter(|l| l.contains(&path.display().to_string())).collect();
        assert_eq!(named.len(), 1, "{}: {err}", path.display());
        assert!(named[0].starts_with("famlx: warning: refused plugin ") && named[0].contains(reason.as_str()));
    }
}

#[test]
fn a_plugin_dir_that_is_not_a_folder_is_an_error() {
    let dir = Scratch::new("plugin-dirs");
    let missing = dir.path().join("missing");
    let file = dir.path().join("file");
    std::fs::write(&file, "not a folder").unwrap();
    let (a, b) = (dir.path().join("loop-a"), dir.path().join("loop-b"));
    std::os::unix::fs::symlink(&b, &a).unwrap();
    std::os::unix::fs::symlink(&a, &b).unwrap();
    let m = fixture("llama-bf16").display().to_string();
    for (d, why) in [(&missing, "no such folder"), (&file, "not a folder"), (&a, "a symlink loop")] {
        let d = d.display().to_string();
        let flag = format!("--plugin-dir {d}: {why}");
        common::expect_error(&["plugins", "--plugin-dir", &d], &[&flag]);
        common::expect_error(&["generate", "--plugin-dir", &d, "--model", &m, "--prompt-ids", "1"], &[&flag]);
    }

    // Directories famlx only looks in (FAMLX_PLUGIN_PATH): a missing one
    // holds no plugins, silently; one that cannot be listed is a warning.
    let deps = common::deps_dir();
    let path = std::env::join_paths([missing.as_path(), file.as_path(), deps.as_path()]).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_famlx")).arg("plugins").env("FAMLX_PLUGIN_PATH", path).output().unwrap();
    let (out, err) = texts(&o);
    assert!(o.status.success(), "{err}");
    assert!(section(&out, "loaded:").contains("famlx-plugin-llama"), "{out}");
    let warnings: Vec<&str> = out.lines().filter(|l| l.starts_with("warning: plugin directory")).collect();
    assert_eq!(warnings.len(), 1, "{out}");
    assert!(warnings[0].contains(&file.display().to_string()) && warnings[0].contains("cannot list it"), "{out}");
}
