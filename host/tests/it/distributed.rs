//! Distributed runs: `famlx launch` starting 2 and 3 real rank processes
//! over MLX's ring backend on 127.0.0.1, tensor and pipeline parallel, give
//! exactly the greedy tokens of one process; the ranks really hold only
//! their share; chat answers as one process; `mlx.launch` (the reference
//! launcher) starts famlx ranks too; a killed rank ends the run with
//! one error naming it; a launch is bounded (ranks, ports), one rank runs
//! in process, and no temporary file outlives a launch. (A server split
//! over ranks: tests/it/serve/api.rs.)

use crate::common;

use common::{famlx, fixture, json_of, texts, Scratch};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const PROMPT: &str = "The river ran past the old mill, and the mill wheel turned";

/// One distributed run at a time ([`common::distributed_lock`]).
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    common::distributed_lock()
}

fn generate_args(model: &Path, extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> =
        ["generate", "--prompt", PROMPT, "-m", "12", "--json", "--model"].iter().map(|s| s.to_string()).collect();
    a.push(model.display().to_string());
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

fn tokens(v: &Value) -> Vec<u64> {
    v["tokens"].as_array().expect("tokens").iter().map(|t| t.as_u64().unwrap()).collect()
}

/// `famlx` as `n` ranks (`famlx launch -n n --`), or alone for 1.
fn ranks(n: usize) -> Command {
    let mut c = famlx();
    if n > 1 {
        c.args(["launch", "-n", &n.to_string(), "--"]);
    }
    c
}

/// One process's `generate --json`.
fn alone(model: &Path) -> Value {
    json_of(&famlx().args(generate_args(model, &[])).output().unwrap())
}

/// `famlx launch -n ranks -- generate … --parallel mode`: rank 0's JSON.
fn launched(model: &Path, n: usize, mode: &str) -> Value {
    let o = self::ranks(n).args(generate_args(model, &["--parallel", mode])).output().unwrap();
    let (out, _) = texts(&o);
    // Only rank 0 prints.
    assert_eq!(out.lines().filter(|l| l.starts_with('{')).count(), 1, "{n} ranks, {mode}: {out}");
    json_of(&o)
}

/// Every split of `model` over 2 and 3 ranks gives the tokens of one
/// process; with `smaller`, rank 0 also peaks at less memory than one
/// process holding the whole model.
fn check_splits(model: &Path, smaller: bool) {
    let want = alone(model);
    for ranks in [2, 3] {
        for mode in ["tensor", "pipeline"] {
            let got = launched(model, ranks, mode);
            assert_eq!(tokens(&got), tokens(&want), "{}: {ranks} ranks, {mode}", model.display());
            if smaller {
                let (one, part) =
                    (want["peak_memory_bytes"].as_f64().unwrap(), got["peak_memory_bytes"].as_f64().unwrap());
                assert!(
                    part < 0.85 * one,
                    "{}: {ranks} ranks, {mode}: rank 0 peaked at {part} bytes, alone {one}",
                    model.display()
                );
            }
        }
    }
}

/// `famlx convert` of a fixture: q4 (groups of 32) with f32 activations, or
/// only cast to f32. Splits sum partial products in the activations' type,
/// so f32 activations make them exact.
fn converted(scratch: &Scratch, variant: &str, q4: bool) -> PathBuf {
    let out = scratch.path().join(format!("{variant}-{}", if q4 { "q4" } else { "f32" }));
    let mut c = famlx();
    c.args(["convert", "--hf-path"]).arg(fixture(variant)).arg("--mlx-path").arg(&out);
    c.args(["--dtype", "float32"]);
    if q4 {
        c.args(["-q", "--q-bits", "4", "--q-group-size", "32"]);
    }
    let o = c.output().unwrap();
    assert!(o.status.success(), "convert {variant}: {}", texts(&o).1);
    out
}

#[test]
fn llama_splits_give_the_tokens_of_one_process() {
    let _one = one_at_a_time();
    let s = Scratch::new("dist-llama");
    check_splits(&fixture("llama-deep-f32"), true);
    check_splits(&converted(&s, "llama-deep-f32", true), false);
}

#[test]
fn qwen3_5_splits_give_the_tokens_of_one_process() {
    let _one = one_at_a_time();
    let s = Scratch::new("dist-qwen3_5");
    check_splits(&converted(&s, "qwen3_5-bf16", false), false);
    check_splits(&fixture("qwen3_5_moe-f32"), false);
    check_splits(&converted(&s, "qwen3_5_moe-f32", true), false);
    // Speculative decoding with the checkpoint's MTP head, tensor parallel.
    let mtp = fixture("qwen3_5_moe-mtp-hf-f32");
    let spec = |n: usize| json_of(&ranks(n).args(generate_args(&mtp, &["--mtp-depth", "2"])).output().unwrap());
    let want = spec(1);
    assert!(want["draft"]["rounds"].as_u64().unwrap() > 0, "{want}");
    for n in [2, 3] {
        let got = spec(n);
        assert_eq!(tokens(&got), tokens(&want), "MTP over {n} tensor-parallel ranks");
        assert_eq!(got["draft"], want["draft"], "MTP over {n} ranks drafts alike");
    }
    // Pipeline ranks would take different rollback paths: refused when asked for.
    let args: Vec<String> = ["launch", "-n", "2", "--"]
        .iter()
        .map(|s| s.to_string())
        .chain(generate_args(&mtp, &["--mtp-depth", "2", "--parallel", "pipeline"]))
        .collect();
    let args: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    common::expect_error(&args, &["speculative decoding does not run with --parallel pipeline"]);
}

#[test]
fn gemma4_splits_give_the_tokens_of_one_process() {
    let _one = one_at_a_time();
    let s = Scratch::new("dist-gemma4");
    check_splits(&fixture("gemma4-vision-f32"), false);
    check_splits(&converted(&s, "gemma4-vision-f32", true), false);
    // Routed experts beside the dense MLP (the 26B-A4B layout).
    check_splits(&fixture("gemma4-moe-hf-f32"), false);
    // KV-shared layers stay on the rank of the layers they read.
    pipeline_logits_are_exact(&fixture("gemma4-e2b-bf16"), &s);
}

/// A pipeline split passes whole hidden states: every prompt position's
/// logits equal one process's bit for bit, in any dtype (here bf16).
fn pipeline_logits_are_exact(model: &Path, scratch: &Scratch) {
    let logits = |n: usize| -> Vec<Vec<f64>> {
        let file = scratch.path().join(format!("logits-{n}.json"));
        let mut c = ranks(n);
        c.args(["generate", "--prompt", PROMPT, "-m", "1", "--model"]).arg(model);
        if n > 1 {
            c.args(["--parallel", "pipeline"]);
        }
        let o = c.arg("--dump-logits").arg(&file).output().unwrap();
        assert!(o.status.success(), "{}", texts(&o).1);
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        v["logits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect())
            .collect()
    };
    let one = logits(1);
    for n in [2, 3] {
        assert!(one == logits(n), "{}: {n} pipeline ranks changed the logits", model.display());
    }
}

#[test]
fn ranks_started_by_mlx_launch_work_too() {
    let _one = one_at_a_time();
    let model = fixture("llama-deep-f32");
    let want = alone(&model);
    // mlx.launch with the reference environment's mlx, running famlx ranks.
    let py = common::reference::python();
    let launcher = py.parent().unwrap().join("mlx.launch");
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut c = Command::new(&launcher);
    c.args(["-n", "2", "--backend", "ring", "--starting-port", &port.to_string(), "--"]);
    c.arg(env!("CARGO_BIN_EXE_famlx"));
    c.args(generate_args(&model, &["--parallel", "tensor"]));
    c.env("FAMLX_PLUGIN_PATH", common::deps_dir());
    let o = c.output().unwrap();
    assert_eq!(tokens(&json_of(&o)), tokens(&want));
}

/// `famlx launch` of `command` on hosts 127.0.0.2 and 127.0.0.3, which it
/// starts through `ssh OPTIONS HOST LINE`. A stand-in `ssh` first on PATH
/// checks the options (no password prompt, a connect timeout), refuses the
/// host named by `FAKE_SSH_REFUSES` as a failed login does (status 255),
/// logs the host (`ssh.log`) and the rank's pid (`pids`), and runs the line as sshd
/// would: in an empty environment, so what the rank needs must come through
/// the line (the ring hostfile, MLX_RANK, `--env`, `--cwd`: `model` in the
/// scratch folder names `model`), its stdin piped from ssh's, and no signal
/// passed on when ssh ends. Both addresses are loopback on Linux, so the
/// ranks' ring really binds the addresses the launcher gave them. The
/// ranks' TMPDIR is the scratch folder's `tmp` (see [`remote_tmp`]).
fn through_ssh(scratch: &Scratch, model: &Path, command: &[String]) -> Command {
    std::os::unix::fs::symlink(model, scratch.path().join("model")).unwrap();
    let bin = scratch.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let (log, pids) = (scratch.path().join("ssh.log"), scratch.path().join("pids"));
    let ssh = bin.join("ssh");
    // The rank's stdin is a FIFO fed by `cat` from ssh's own stdin: when
    // the rank ends, so does this ssh (as with sshd); when this ssh is
    // killed, `cat` still ends once the launcher's pipe closes. (An
    // asynchronous list's stdin is /dev/null unless redirected: hence fd 3.)
    let script = format!(
        "#!/bin/sh\n[ \"$1 $2 $3 $4\" = '-o BatchMode=yes -o ConnectTimeout=15' ] || exit 254\nshift 4\n\
         [ \"$1\" = \"$FAKE_SSH_REFUSES\" ] && {{ echo 'Permission denied (publickey).' >&2; exit 255; }}\n\
         echo \"$1\" >> '{log}'\nfifo='{dir}'/stdin.$$\nmkfifo \"$fifo\"\nexec 3<&0\n\
         cat <&3 > \"$fifo\" &\nfeeder=$!\n\
         env -i PATH=/usr/bin:/bin HOME=\"$HOME\" sh -c \"$2\" < \"$fifo\" &\nrank=$!\n\
         echo $rank >> '{pids}'\nwait $rank\ncode=$?\nkill $feeder 2>/dev/null\nexit $code\n",
        log = log.display(),
        dir = scratch.path().display(),
        pids = pids.display()
    );
    std::fs::write(&ssh, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&ssh, std::fs::Permissions::from_mode(0o755)).unwrap();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let plugins = format!("FAMLX_PLUGIN_PATH={}", common::deps_dir().display());
    std::fs::create_dir_all(remote_tmp(scratch)).unwrap();
    let tmp = format!("TMPDIR={}", remote_tmp(scratch).display());
    let mut c = famlx();
    c.args(["launch", "--hosts", "127.0.0.2,127.0.0.3", "--backend", "ring", "-p", &port.to_string()]);
    // A rank whose peer never comes waits this long (the stand-in keeps a
    // stopped rank's stderr open until it ends, and the launcher reads it).
    c.args(["--env", &plugins, "--env", "FAMLX_DIST_TIMEOUT=10", "--env", &tmp, "--cwd"]).arg(scratch.path()).arg("--");
    c.args(command);
    c.env("PATH", path);
    c
}

/// The TMPDIR of [`through_ssh`]'s ranks, where each writes the ring's hostfile.
fn remote_tmp(scratch: &Scratch) -> PathBuf {
    scratch.path().join("tmp")
}

/// What is left in `dir`.
fn left_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect()
}

/// Kills what a failed test would leave running.
struct KillOnDrop(Vec<u32>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = Command::new("kill").args(["-9", &p.to_string()]).status();
        }
    }
}

/// The pids [`through_ssh`]'s ranks logged (once both have).
fn remote_pids(scratch: &Scratch) -> Vec<u32> {
    let t0 = Instant::now();
    loop {
        let text = std::fs::read_to_string(scratch.path().join("pids")).unwrap_or_default();
        let pids: Vec<u32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
        if pids.len() == 2 {
            return pids;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "the ranks did not start: {text}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn ranks_on_other_hosts_start_through_ssh() {
    let _one = one_at_a_time();
    let model = fixture("llama-deep-f32");
    let want = alone(&model);
    let scratch = Scratch::new("ssh");
    let o =
        through_ssh(&scratch, &model, &generate_args(Path::new("model"), &["--parallel", "tensor"])).output().unwrap();
    assert_eq!(tokens(&json_of(&o)), tokens(&want), "{}", texts(&o).1);
    let logged = std::fs::read_to_string(scratch.path().join("ssh.log")).unwrap();
    let mut hosts: Vec<&str> = logged.lines().collect();
    hosts.sort();
    assert_eq!(hosts, ["127.0.0.2", "127.0.0.3"], "{logged}");
    // Each rank wrote the ring's hostfile to a temporary file of its own
    // and removed it once it had joined.
    assert_eq!(left_in(&remote_tmp(&scratch)), Vec::<String>::new());
}

#[test]
fn a_host_ssh_cannot_log_in_to_is_one_error_naming_it() {
    let _one = one_at_a_time();
    let scratch = Scratch::new("ssh-refused");
    let model = fixture("llama-deep-f32");
    let o = through_ssh(&scratch, &model, &generate_args(Path::new("model"), &[]))
        .env("FAKE_SSH_REFUSES", "127.0.0.3")
        .output()
        .unwrap();
    let (_, err) = texts(&o);
    assert!(!o.status.success());
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("famlx: error:")).collect();
    assert_eq!(errors.len(), 1, "{err}");
    assert!(errors[0].contains("rank 1: ssh to 127.0.0.3 failed (exit status 255"), "{err}");
}

#[test]
fn remote_ranks_end_when_the_launcher_is_killed() {
    // ssh passes no signal on: a server's remote ranks outlived a killed
    // launcher. Rank 1 now ends when its stdin (the launcher's pipe)
    // closes, and rank 0 on losing its peer.
    let _one = one_at_a_time();
    let scratch = Scratch::new("ssh-kill");
    let serve: Vec<String> = ["serve", "--port", "0", "--model", "model"].iter().map(|s| s.to_string()).collect();
    let mut launcher =
        through_ssh(&scratch, &fixture("llama-deep-f32"), &serve).stderr(Stdio::piped()).spawn().unwrap();
    let err = launcher.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            if line.contains("on http://") {
                let _ = tx.send(());
            }
        }
    });
    let pids = remote_pids(&scratch);
    let _reaper = KillOnDrop(pids.clone());
    rx.recv_timeout(Duration::from_secs(120)).expect("the server listens");
    launcher.kill().unwrap();
    launcher.wait().unwrap();
    let t0 = Instant::now();
    while !pids.iter().all(|&p| zombie_or_gone(p)) {
        assert!(t0.elapsed() < Duration::from_secs(30), "remote ranks {pids:?} still run 30 s after the launcher died");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn wait_for(child: &mut std::process::Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// The pids of `parent`'s children.
fn children(parent: u32) -> Vec<u32> {
    let text = std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children")).unwrap_or_default();
    text.split_whitespace().filter_map(|p| p.parse().ok()).collect()
}

#[test]
fn a_killed_rank_ends_the_run_with_one_error_naming_it() {
    let _one = one_at_a_time();
    let model = fixture("llama-deep-f32");
    let mut launcher = famlx()
        .args([
            "launch",
            "-n",
            "3",
            "--",
            "bench",
            "-p",
            "32",
            "-g",
            "1000000",
            "-n",
            "1",
            "--max-kv-size",
            "64",
            "--model",
        ])
        .arg(&model)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the three ranks run, then let them get going.
    let start = Instant::now();
    let ranks = loop {
        let kids = children(launcher.id());
        if kids.len() == 3 {
            break kids;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "ranks did not start");
        std::thread::sleep(Duration::from_millis(50));
    };
    std::thread::sleep(Duration::from_secs(2));
    // SAFETY: killing a process this test started (through the launcher).
    unsafe { libc::kill(ranks[1] as i32, libc::SIGKILL) };
    let killed = Instant::now();
    let status = wait_for(&mut launcher, Duration::from_secs(30));
    let Some(status) = status else {
        let _ = launcher.kill();
        panic!("the launcher did not end within 30 s of a rank being killed");
    };
    let o = Output { status, stdout: Vec::new(), stderr: launcher.stderr.take().map(read_all).unwrap_or_default() };
    let (_, err) = texts(&o);
    assert!(!status.success());
    assert!(killed.elapsed() < Duration::from_secs(30));
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("famlx: error:")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains("rank 1 failed (signal 9)"), "{err}");
    for r in &ranks {
        assert!(!Path::new(&format!("/proc/{r}/cmdline")).exists() || zombie_or_gone(*r), "rank pid {r} still runs");
    }
}

fn read_all(mut r: impl std::io::Read) -> Vec<u8> {
    let mut v = Vec::new();
    let _ = r.read_to_end(&mut v);
    v
}

fn zombie_or_gone(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| s.contains(") Z "))
}

#[test]
fn bad_launches_are_one_line_errors() {
    let _one = one_at_a_time();
    common::expect_error(&["launch", "-n", "2", "--backend", "tcp", "--", "plugins"], &["--backend tcp"]);
    common::expect_error(
        &["launch", "--hostfile", "/nonexistent/hosts.json", "--", "plugins"],
        &["/nonexistent/hosts.json"],
    );
    // A peer that never comes: the rank gives up within the deadline.
    let hosts = Scratch::new("dist-unreachable");
    let file = hosts.path().join("ring.json");
    let ports: Vec<u16> =
        (0..2).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()).collect();
    std::fs::write(&file, format!(r#"[["127.0.0.1:{}"],["127.0.0.1:{}"]]"#, ports[0], ports[1])).unwrap();
    let t0 = Instant::now();
    let o = famlx()
        .args(["generate", "--prompt", "x", "--model"])
        .arg(fixture("llama-deep-f32"))
        .env("MLX_RANK", "0")
        .env("MLX_HOSTFILE", &file)
        .env("FAMLX_DIST_TIMEOUT", "3")
        .output()
        .unwrap();
    let err = texts(&o).1;
    assert!(!o.status.success());
    assert!(t0.elapsed() < Duration::from_secs(30), "took {:?}", t0.elapsed());
    assert!(
        err.contains("famlx: error: rank 0: the other ranks of the ring group could not be reached within 3 s"),
        "{err}"
    );
    // A rank that fails: one line, naming it and saying why.
    common::expect_error(
        &["launch", "-n", "2", "--", "generate", "--model", "/nonexistent/model", "--prompt", "x"],
        &["/nonexistent/model", "the other ranks were stopped"],
    );
}

#[test]
fn chat_as_ranks_answers_as_one_process() {
    let _one = one_at_a_time();
    use std::io::Write;
    let model = fixture("llama-deep-f32");
    let lines = "The mill wheel turned\nAnd the river?\n/exit\n";
    let chat = |n: usize| -> String {
        let mut child = ranks(n)
            .args(["chat", "-m", "10", "--model"])
            .arg(&model)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(lines.as_bytes()).unwrap();
        let o = child.wait_with_output().unwrap();
        let (out, err) = texts(&o);
        assert!(o.status.success(), "{err}");
        out
    };
    let alone = chat(1);
    assert!(alone.lines().count() >= 2, "{alone}");
    assert_eq!(chat(2), alone);
}

#[test]
fn images_and_audio_across_ranks_give_the_tokens_of_one_process() {
    let _one = one_at_a_time();
    // The towers run whole on every rank; the decoder splits.
    let image = fixture("images").join("portrait.png");
    let audio = fixture("audio").join("chirp.wav");
    let cases = [
        ("qwen3_5-vl-f32", "--image", &image),
        ("gemma4-vision-f32", "--image", &image),
        ("gemma4-audio-f32", "--audio", &audio),
    ];
    for (name, flag, file) in cases {
        let model = fixture(name);
        let extra = [flag, file.to_str().unwrap()];
        let want = json_of(&famlx().args(generate_args(&model, &extra)).output().unwrap());
        assert!(want["image_tokens"].as_u64().unwrap() + want["audio_tokens"].as_u64().unwrap() > 0, "{name}: {want}");
        for mode in ["tensor", "pipeline"] {
            let mut args = extra.to_vec();
            args.extend(["--parallel", mode]);
            let o = ranks(2).args(generate_args(&model, &args)).output().unwrap();
            assert_eq!(tokens(&json_of(&o)), tokens(&want), "{name}: 2 ranks, {mode}, with {flag}");
        }
    }
}

/// One rank on this machine is no group: `famlx launch -n 1` runs the
/// command in its own process (with `--env` set), at once, with the tokens
/// of a plain run.
#[test]
fn one_rank_runs_in_process() {
    let _one = one_at_a_time();
    let model = fixture("llama-deep-f32");
    let want = alone(&model);
    let t0 = Instant::now();
    let o = famlx().args(["launch", "-n", "1", "--"]).args(generate_args(&model, &[])).output().unwrap();
    assert_eq!(tokens(&json_of(&o)), tokens(&want));
    assert!(t0.elapsed() < Duration::from_secs(20), "took {:?}", t0.elapsed());
    // In this process: no rank started, so no rank's launcher pipe.
    let o =
        famlx().args(["launch", "-n", "1", "--env", "FAMLX_PLUGIN_PATH=/famlx-launch-env", "--", "plugins"]).output();
    let (out, err) = texts(&o.unwrap());
    assert!(out.lines().any(|l| l.trim() == "/famlx-launch-env"), "--env not applied:\n{out}\n{err}");
    // Its usage errors are the command's own.
    let o = famlx().args(["launch", "-n", "1", "--", "generate", "--frobnicate"]).output().unwrap();
    let (_, err) = texts(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--frobnicate"), "{err}");
}

/// Ranks and ports have bounds, checked before anything starts: one line
/// naming the flag, at once (`-n 70000` used to reach 12 GB building the
/// ranks' environments).
#[test]
fn launches_are_bounded() {
    let _one = one_at_a_time();
    for (args, must) in [
        (vec!["--hosts", "127.0.0.1,localhost", "-n", "600"], vec!["-n 600 with 2 hosts", "at most 1024 ranks"]),
        (vec!["-n", "2", "-p", "65535"], vec!["--starting-port 65535", "65535-65536, past 65535"]),
        (vec!["-n", "3", "-p", "65534"], vec!["--starting-port 65534", "past 65535"]),
        (vec!["-n", "2", "-p", "0"], vec!["--starting-port 0"]),
        (vec!["-n", "2", "--backend", "nccl", "--hosts", "127.0.0.2", "--nccl-port", "0"], vec!["--nccl-port 0"]),
    ] {
        let mut a = vec!["launch"];
        a.extend(args);
        a.extend(["--", "plugins"]);
        common::expect_error(&a, &must);
    }
    let hosts = Scratch::new("many-hosts");
    let file = hosts.path().join("hosts.json");
    let many: Vec<String> = (0..1025).map(|_| r#"{"ssh":"127.0.0.1","ips":["127.0.0.1"]}"#.to_string()).collect();
    std::fs::write(&file, format!("[{}]", many.join(","))).unwrap();
    let f = file.display().to_string();
    common::expect_error(&["launch", "--hostfile", &f, "--", "plugins"], &[&f, "1025 hosts", "at most 1024 ranks"]);
    // -n itself: a usage error, at once.
    let t0 = Instant::now();
    let o = famlx().args(["launch", "-n", "70000", "--", "plugins"]).output().unwrap();
    let (_, err) = texts(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.lines().next().is_some_and(|l| l.contains("'70000'") && l.contains("1..=1024")), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(5));
}

/// The launcher's temporary folder is private and goes when the launch
/// ends, however it ends: ranks that fail, or an ssh that cannot start.
#[test]
fn a_launch_leaves_no_temporary_folder() {
    let _one = one_at_a_time();
    let tmp = Scratch::new("launch-tmp");
    let model = fixture("llama-deep-f32");
    // While the ranks run, their ring's hostfile is in a folder only this
    // user can enter, named unpredictably.
    let mut c = famlx();
    c.args(["launch", "-n", "2", "--", "bench", "-p", "8", "-g", "100000", "-n", "1", "--max-kv-size", "16"]);
    let launcher = c.arg("--model").arg(&model).env("TMPDIR", tmp.path()).stdout(Stdio::null());
    let mut launcher = launcher.stderr(Stdio::null()).spawn().unwrap();
    let t0 = Instant::now();
    let folder = loop {
        if let Some(d) = left_in(tmp.path()).into_iter().next() {
            break tmp.path().join(d);
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "no temporary folder");
        std::thread::sleep(Duration::from_millis(20));
    };
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&folder).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "{}", folder.display());
    let name = folder.file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with("famlx-launch-") && !name.ends_with(&launcher.id().to_string()), "{name}");
    // SAFETY: signalling the launcher this test started; it stops its ranks.
    unsafe { libc::kill(launcher.id() as i32, libc::SIGTERM) };
    assert!(wait_for(&mut launcher, Duration::from_secs(30)).is_some(), "the launcher did not stop");
    assert_eq!(left_in(tmp.path()), Vec::<String>::new(), "after a stopped launch");

    // Ranks that fail.
    let o = famlx()
        .args(["launch", "-n", "2", "--", "generate", "--model", "/nonexistent/model", "--prompt", "x"])
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert_eq!(left_in(tmp.path()), Vec::<String>::new(), "after failed ranks");
    // A rank that cannot be started at all (no ssh on PATH).
    let empty = Scratch::new("no-ssh");
    let o = famlx()
        .args(["launch", "--hosts", "127.0.0.2,127.0.0.3", "--backend", "ring", "--", "plugins"])
        .env("TMPDIR", tmp.path())
        .env("PATH", empty.path())
        .output()
        .unwrap();
    let (_, err) = texts(&o);
    assert!(err.contains("famlx: error: cannot run ssh to 127.0.0.2"), "{err}");
    assert_eq!(left_in(tmp.path()), Vec::<String>::new(), "after a rank that could not start");
}
