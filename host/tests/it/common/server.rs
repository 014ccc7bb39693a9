//! A `famlx serve` process for tests: started on a free port, its log
//! collected, stopped with SIGTERM (or killed when the test fails).

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A running server.
pub struct Server {
    child: Option<Child>,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl Server {
    /// `famlx serve --port 0 ARGS`, once it says where it listens.
    pub fn start(args: &[&str]) -> Server {
        Self::start_after(&[], args)
    }

    /// `famlx launch -n RANKS -- serve --port 0 ARGS`: a server split over
    /// ranks, once rank 0 says where it listens.
    #[allow(dead_code)]
    pub fn start_ranks(ranks: usize, args: &[&str]) -> Server {
        let n = ranks.to_string();
        Self::start_after(&["launch", "-n", &n, "--"], args)
    }

    fn start_after(before: &[&str], args: &[&str]) -> Server {
        let mut child = super::famlx()
            .args(before)
            .args(["serve", "--port", "0"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("famlx serve starts");
        let stderr = child.stderr.take().expect("piped");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let l = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(at) = line.find("on http://") {
                    let url =
                        line[at + 3..].split_whitespace().next().unwrap_or("").trim_end_matches("/v1").to_string();
                    let _ = tx.send(url);
                }
                l.lock().unwrap().push(line);
            }
        });
        let base = match rx.recv_timeout(Duration::from_secs(180)) {
            Ok(b) => b,
            Err(_) => {
                let _ = child.kill();
                panic!("famlx serve did not start:\n{}", log.lock().unwrap().join("\n"));
            }
        };
        Server { child: Some(child), base, log }
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Sends SIGTERM and waits (at most `limit`) for the exit status.
    pub fn stop(&mut self, limit: Duration) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        let _ = std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
        let t0 = Instant::now();
        loop {
            if let Some(s) = child.try_wait().unwrap() {
                return s;
            }
            if t0.elapsed() > limit {
                let _ = child.kill();
                panic!("famlx serve did not stop within {limit:?} of SIGTERM:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// GET `path`: status and body.
    pub fn get(&self, path: &str) -> (u16, String) {
        answer(ureq::get(&format!("{}{path}", self.base)).call())
    }

    /// POST `body` to `path` (with `key` as bearer token): status and body.
    pub fn post(&self, path: &str, body: &str, key: Option<&str>) -> (u16, String) {
        let mut r = ureq::post(&format!("{}{path}", self.base)).set("Content-Type", "application/json");
        if let Some(k) = key {
            r = r.set("Authorization", &format!("Bearer {k}"));
        }
        answer(r.send_string(body))
    }

    /// POST to `path` with headers declaring a `len`-byte body, and none of
    /// its bytes: status and body of the answer. A server that refuses the
    /// declared size answers and closes without reading; a client still
    /// writing the body would race that close (EPIPE), so none is sent.
    #[allow(dead_code)]
    pub fn post_declared(&self, path: &str, len: usize) -> (u16, String) {
        use std::io::{Read, Write};
        let addr = self.base.trim_start_matches("http://");
        let mut c = std::net::TcpStream::connect(addr).expect("connect");
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
             Content-Length: {len}\r\nConnection: close\r\n\r\n"
        );
        c.write_all(head.as_bytes()).expect("send headers");
        let mut raw = Vec::new();
        // The server closes after its answer; a reset after it is fine.
        let _ = c.read_to_end(&mut raw);
        let text = String::from_utf8_lossy(&raw).into_owned();
        let status = text.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("{text}"));
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
        (status, body)
    }
}

impl Server {
    /// Runs a scenario of host/tests/data/serve_client.py (the official
    /// `openai` client) against this server: its JSON report.
    #[allow(dead_code)]
    pub fn scenario(&self, scenario: &str, args: serde_json::Value) -> serde_json::Value {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/serve_client.py");
        let o = std::process::Command::new(super::reference::python())
            .arg(script)
            .args([scenario, &self.base, &args.to_string()])
            .output()
            .expect("python runs");
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "serve_client.py {scenario} failed:\n{out}\n{}\nserver log:\n{}",
            String::from_utf8_lossy(&o.stderr),
            self.log()
        );
        serde_json::from_str(out.lines().last().unwrap_or("")).unwrap_or_else(|e| panic!("{e}: {out}"))
    }

    /// Runs `scripts/SCRIPT` with the reference Python against this
    /// server (the base URL, then `args`); it must succeed, and its last
    /// line is its JSON report.
    #[allow(dead_code)]
    pub fn script_report(&self, script: &str, args: &[&str]) -> serde_json::Value {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts").join(script);
        let o = std::process::Command::new(super::reference::python())
            .arg(path)
            .arg(&self.base)
            .args(args)
            .output()
            .expect("python runs");
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{out}\n{}\n{}", String::from_utf8_lossy(&o.stderr), self.log());
        serde_json::from_str(out.lines().last().unwrap_or("")).unwrap_or_else(|e| panic!("{e}: {out}"))
    }

    /// POST `body` to /v1/completions, which must answer 200: the reply.
    #[allow(dead_code)]
    pub fn completion(&self, body: &serde_json::Value) -> serde_json::Value {
        let (status, text) = self.post("/v1/completions", &body.to_string(), None);
        assert_eq!(status, 200, "{body}: {text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    }

    /// A counter of the server's /metrics (0 when absent).
    #[allow(dead_code)]
    pub fn metric(&self, name: &str) -> u64 {
        let text = self.get("/metrics").1;
        let prefix = format!("{name} ");
        text.lines().find_map(|l| l.strip_prefix(&prefix)).and_then(|v| v.parse().ok()).unwrap_or(0)
    }
}

fn answer(r: Result<ureq::Response, ureq::Error>) -> (u16, String) {
    match r {
        Ok(r) => (r.status(), r.into_string().unwrap_or_default()),
        Err(ureq::Error::Status(s, r)) => (s, r.into_string().unwrap_or_default()),
        Err(e) => panic!("request failed: {e}"),
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
