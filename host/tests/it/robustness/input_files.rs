//! Special files where famlx reads an input: a FIFO (which would block the
//! reader forever), `/dev/zero` and `/dev/urandom` (which never end) and
//! folders, as every kind of input a user names (a checkpoint's config,
//! tokenizer, template, generation and processor settings, index and
//! weights; images, audio, prompt caches, hostfiles). Each is one error line
//! naming the file and what it is, at once; files past their kind's size
//! bound are refused before they are read.

use crate::common;

use common::{expect_error_within, fixture, fixture_copy, Scratch};
use std::path::{Path, PathBuf};

/// Generous: each run loads a tiny model in well under a second.
const SECS: u64 = 60;

fn mkfifo(p: &Path) {
    let _ = std::fs::remove_file(p);
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo {}", p.display());
}

fn link(p: &Path, to: &str) {
    let _ = std::fs::remove_file(p);
    std::os::unix::fs::symlink(to, p).unwrap();
}

/// A sparse file of `len` bytes (nothing is written).
fn sparse(p: &Path, len: u64) {
    std::fs::File::create(p).unwrap().set_len(len).unwrap();
}

fn generate(model: &Path, extra: &[&str], must: &[&str]) {
    let m = model.display().to_string();
    let mut args = vec!["generate", "--model", &m, "-p", "hi", "--max-tokens", "1"];
    args.extend_from_slice(extra);
    expect_error_within(SECS, &args, must);
}

/// Each file of a checkpoint folder made a FIFO, a link to a device, or
/// past its bound.
#[test]
fn checkpoint_files_must_be_regular_and_bounded() {
    type Make = fn(&Path);
    let cases: [(&str, Make, &str); 10] = [
        ("config.json", mkfifo, "FIFO"),
        ("config.json", |p| link(p, "/dev/zero"), "character device"),
        ("config.json", |p| sparse(p, 65 << 20), "over the 64 MiB famlx reads for a config"),
        ("tokenizer.json", |p| link(p, "/dev/urandom"), "character device"),
        ("tokenizer.json", |p| sparse(p, 300 << 20), "over the 256 MiB"),
        ("tokenizer_config.json", mkfifo, "FIFO"),
        ("generation_config.json", |p| link(p, "/dev/zero"), "character device"),
        ("chat_template.jinja", mkfifo, "FIFO"),
        ("model.safetensors.index.json", mkfifo, "FIFO"),
        ("model.safetensors", mkfifo, "FIFO"),
    ];
    for (file, make, says) in cases {
        let dir = fixture_copy("llama-bf16");
        let p = dir.path().join(file);
        make(&p);
        generate(dir.path(), &[], &[&p.display().to_string(), says]);
    }
    // A folder where a file belongs.
    let dir = fixture_copy("llama-bf16");
    let p = dir.path().join("chat_template.jinja");
    std::fs::remove_file(&p).unwrap();
    std::fs::create_dir(&p).unwrap();
    generate(dir.path(), &[], &[&p.display().to_string(), "a directory"]);
    // The processor settings a vision checkpoint reads beside its config.
    let dir = fixture_copy("gemma4-vision-f32");
    let p = dir.path().join("processor_config.json");
    mkfifo(&p);
    generate(dir.path(), &[], &[&p.display().to_string(), "FIFO"]);
}

/// `--image`, `--audio`, `--prompt-cache-file` and a launch hostfile.
#[test]
fn named_inputs_must_be_regular_files() {
    let s = Scratch::new("input-special");
    let fifo = s.path().join("fifo");
    mkfifo(&fifo);
    let f = fifo.display().to_string();
    let big = s.path().join("big.png");
    sparse(&big, 257 << 20);
    let b = big.display().to_string();
    let vision = fixture("gemma4-vision-f32");
    let audio = fixture("gemma4-audio-f32");
    for (model, flag, path, says) in [
        (&vision, "--image", f.as_str(), "FIFO"),
        (&vision, "--image", "/dev/zero", "character device"),
        (&vision, "--image", b.as_str(), "over the 256 MiB famlx reads for an image"),
        (&audio, "--audio", f.as_str(), "FIFO"),
        (&audio, "--audio", "/dev/urandom", "character device"),
    ] {
        generate(model, &[flag, path], &[path, says]);
    }
    let llama = fixture("llama-bf16");
    generate(&llama, &["--prompt-cache-file", &f], &[&f, "FIFO"]);
    generate(&llama, &["--prompt-cache-file", "/dev/zero"], &["/dev/zero", "character device"]);
    let args = ["launch", "--hostfile", &f, "--", "generate", "-p", "hi"];
    expect_error_within(SECS, &args, &[&f, "FIFO"]);
}

/// A weight file given as the model: a FIFO named `.gguf`.
#[test]
fn a_gguf_model_must_be_a_regular_file() {
    let s = Scratch::new("input-gguf");
    let p: PathBuf = s.path().join("model.gguf");
    mkfifo(&p);
    let m = p.display().to_string();
    expect_error_within(SECS, &["generate", "--model", &m, "-p", "hi"], &[&m, "FIFO"]);
}
