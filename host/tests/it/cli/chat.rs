//! `famlx chat` as a user drives it: commands, a banner, lines that are
//! not text or too long, endless input, and Ctrl-C (a real SIGINT, alone or
//! in a burst) during a long prefill and at the prompt.

use crate::common;

use common::{famlx, fixture};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

/// A running `famlx chat` with its stderr and stdout lines arriving on a
/// channel.
struct Chat {
    child: Child,
    stdin: Option<ChildStdin>,
    err: Receiver<String>,
    seen: Vec<String>,
}

impl Chat {
    fn start(extra: &[&str]) -> Chat {
        Chat::start_with(extra, Stdio::piped())
    }

    /// [`Chat::start`] with its stdin from `stdin`.
    fn start_with(extra: &[&str], stdin: Stdio) -> Chat {
        let m = fixture("qwen3-bf16").display().to_string();
        let mut child = famlx()
            .args(["chat", "--model", &m, "--max-tokens", "3"])
            .args(extra)
            .env("FAMLX_LOG", "famlx=debug")
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let (tx, err) = channel();
        let lines = |r: Box<dyn std::io::Read + Send>, tx: std::sync::mpsc::Sender<String>| {
            std::thread::spawn(move || {
                for l in BufReader::new(r).lines().map_while(Result::ok) {
                    if tx.send(l).is_err() {
                        break;
                    }
                }
            });
        };
        lines(Box::new(child.stderr.take().unwrap()), tx.clone());
        lines(Box::new(child.stdout.take().unwrap()), tx);
        Chat { child, stdin, err, seen: Vec::new() }
    }

    fn send(&mut self, bytes: &[u8]) {
        let s = self.stdin.as_mut().unwrap();
        s.write_all(bytes).unwrap();
        s.flush().unwrap();
    }

    /// Waits for a stderr line containing `pat`; panics with what was seen after `secs`.
    fn wait_for(&mut self, pat: &str, secs: u64) -> String {
        let end = Instant::now() + Duration::from_secs(secs);
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.err.recv_timeout(left) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if l.contains(pat) {
                        return l;
                    }
                }
                Err(_) => panic!("no `{pat}` within {secs} s; stderr so far:\n{}", self.seen.join("\n")),
            }
        }
    }

    fn interrupt(&self) {
        let ok = std::process::Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -INT failed");
    }

    /// Waits for the process to end by itself; its exit status.
    fn wait_exit(&mut self, secs: u64) -> std::process::ExitStatus {
        let end = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            if Instant::now() > end {
                let _ = self.child.kill();
                panic!("chat did not exit within {secs} s; stderr:\n{}", self.seen.join("\n"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Chat {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn commands_banner_and_bad_lines() {
    let mut c = Chat::start(&[]);
    let banner = c.wait_for("famlx chat:", 60);
    assert!(banner.contains("qwen3") && banner.contains("/help"), "{banner}");
    c.send(b"hello\n/help\n/frobnicate\n\xff\xfe not text\n");
    c.wait_for("prefilled", 60);
    c.wait_for("unknown command /frobnicate", 30);
    c.wait_for("not UTF-8", 30);
    // A message longer than the model's context (40960) is refused; the REPL goes on.
    c.send(("word ".repeat(14_000) + "\n").as_bytes());
    let e = c.wait_for("famlx: error:", 60);
    assert!(e.contains("40960"), "{e}");
    c.send(b"hi again\n");
    c.wait_for("prefilled", 60);
    drop(c.stdin.take());
    assert!(c.wait_exit(30).success());
    // Exactly two turns reached the model: the commands and the bad line did not.
    let turns = c.seen.iter().filter(|l| l.contains("prefilled")).count();
    assert_eq!(turns, 2, "{}", c.seen.join("\n"));
}

/// Ctrl-C stops a long prefill and the REPL goes on; at the prompt, a first
/// Ctrl-C says how to quit and a second one quits.
#[test]
fn ctrl_c_stops_a_long_prefill_and_twice_quits() {
    let mut c = Chat::start(&["--prefill-step-size", "16"]);
    c.wait_for("famlx chat:", 60);
    // About 30k tokens in chunks of 16: minutes of prefill.
    let long = "word ".repeat(10_000) + "\n";
    c.send(long.as_bytes());
    std::thread::sleep(Duration::from_millis(1500));
    let t = Instant::now();
    c.interrupt();
    c.wait_for("(interrupted)", 30);
    assert!(t.elapsed() < Duration::from_secs(30), "took {:?}", t.elapsed());
    // The conversation goes on.
    c.send(b"hi\n");
    c.wait_for("prefilled", 60);
    // At the prompt: the first Ctrl-C is a hint, the second quits.
    std::thread::sleep(Duration::from_millis(300));
    c.interrupt();
    c.wait_for("Ctrl-C again", 30);
    c.interrupt();
    assert!(c.wait_exit(30).success());
}

/// A burst of Ctrl-C during a reply stops the reply and nothing else: the
/// REPL stays, the earlier turn is still in the conversation (`/history`),
/// and the next turn runs; Ctrl-C at the prompt still quits after the hint.
#[test]
fn a_burst_of_ctrl_c_during_a_reply_keeps_the_conversation() {
    let mut c = Chat::start(&["--prefill-step-size", "16"]);
    c.wait_for("famlx chat:", 60);
    c.send(b"hello there\n");
    c.wait_for("prefilled", 60);
    c.send(("word ".repeat(10_000) + "\n").as_bytes());
    std::thread::sleep(Duration::from_millis(1500));
    for _ in 0..6 {
        c.interrupt();
        std::thread::sleep(Duration::from_millis(40));
    }
    c.wait_for("(interrupted)", 30);
    std::thread::sleep(Duration::from_millis(500));
    assert!(c.child.try_wait().unwrap().is_none(), "the burst quit the REPL:\n{}", c.seen.join("\n"));
    c.send(b"/history\n");
    c.wait_for("user: hello there", 30);
    c.wait_for("assistant: ", 30);
    assert!(!c.seen.iter().any(|l| l.contains("Ctrl-C again")), "a press of the burst counted at the prompt");
    c.send(b"and now?\n");
    c.wait_for("prefilled", 60);
    c.send(b"/history\n");
    c.wait_for("user: and now?", 30);
    // The stopped turn never joined the conversation.
    assert!(!c.seen.iter().any(|l| l.starts_with("user: word")), "{}", c.seen.join("\n"));
    std::thread::sleep(Duration::from_millis(300));
    c.interrupt();
    c.wait_for("Ctrl-C again", 30);
    c.interrupt();
    assert!(c.wait_exit(30).success());
}

/// A line over 1 MiB is skipped with one warning and the REPL goes on.
#[test]
fn a_line_over_the_bound_is_skipped() {
    let mut c = Chat::start(&[]);
    c.wait_for("famlx chat:", 60);
    c.send(&[vec![b'a'; 2 << 20], b"\nhello\n".to_vec()].concat());
    c.wait_for("longer than 1 MiB; skipped", 60);
    c.wait_for("prefilled", 60);
    drop(c.stdin.take());
    assert!(c.wait_exit(30).success());
    assert_eq!(c.seen.iter().filter(|l| l.contains("prefilled")).count(), 1, "{}", c.seen.join("\n"));
}

/// The resident memory of `pid` in bytes (Linux).
#[cfg(target_os = "linux")]
fn rss(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb = s.lines().find_map(|l| l.strip_prefix("VmRSS:")).unwrap().trim().trim_end_matches(" kB").trim();
    kb.parse::<u64>().unwrap() * 1024
}

/// stdin that never ends a line (`/dev/zero`, gigabytes a second): one
/// warning, memory stays flat, and Ctrl-C twice still quits.
#[cfg(target_os = "linux")]
#[test]
fn endless_stdin_keeps_memory_flat() {
    let zero = std::fs::File::open("/dev/zero").unwrap();
    let mut c = Chat::start_with(&[], Stdio::from(zero));
    c.wait_for("longer than 1 MiB; skipped", 60);
    let before = rss(c.child.id());
    std::thread::sleep(Duration::from_secs(2));
    let after = rss(c.child.id());
    assert!(after < before + (64 << 20), "memory grew from {before} to {after} bytes on endless input");
    c.interrupt();
    c.wait_for("Ctrl-C again", 30);
    c.interrupt();
    assert!(c.wait_exit(30).success());
}
