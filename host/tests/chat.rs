//! `famlx chat` as a user drives it: commands, a banner, lines that are
//! not text, and Ctrl-C (a real SIGINT) during a long prefill and at the
//! prompt.

mod common;

use common::{famlx, fixture};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

/// A running `famlx chat` with its stderr lines arriving on a channel.
struct Chat {
    child: Child,
    stdin: Option<ChildStdin>,
    err: Receiver<String>,
    seen: Vec<String>,
}

impl Chat {
    fn start(extra: &[&str]) -> Chat {
        let m = fixture("qwen3-bf16").display().to_string();
        let mut child = famlx()
            .args(["chat", "--model", &m, "--max-tokens", "3"])
            .args(extra)
            .env("FAMLX_LOG", "famlx=debug")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stderr = child.stderr.take().unwrap();
        let (tx, err) = channel();
        std::thread::spawn(move || {
            for l in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
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
