//! A stand-in for the Hugging Face hub on 127.0.0.1, for tests of `--model
//! org/name` (and of GGUF repos, `org/NAME-GGUF:TAG`): the repo-info API and the `resolve` file endpoint (ranges,
//! ETag, X-Repo-Commit, HEAD), a private repo behind a token, and switches
//! that make it hostile: a file's transfers cut halfway, headers of the
//! test's choosing (an ETag or commit that is a path), a listing naming any
//! commit, a redirect loop, and bodies that run past what was announced,
//! stall or trickle. Written on std's TcpListener rather than an HTTP crate
//! because the tests need to break responses on purpose.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// One repo the server holds.
#[derive(Clone)]
pub struct HubRepo {
    /// `org/name`.
    pub id: String,
    /// The commit every file is served at.
    pub sha: String,
    /// Files by name.
    pub files: BTreeMap<String, Vec<u8>>,
    /// A token the repo needs (`Authorization: Bearer ...`).
    pub token: Option<String>,
}

impl HubRepo {
    /// A repo with every file of `dir` (flat), plus `extra` files.
    pub fn from_dir(id: &str, dir: &Path, extra: &[(&str, &[u8])]) -> HubRepo {
        let mut files = BTreeMap::new();
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_file() {
                files.insert(e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap());
            }
        }
        for (n, b) in extra {
            files.insert(n.to_string(), b.to_vec());
        }
        HubRepo { id: id.into(), sha: "0123456789abcdef0123456789abcdef01234567".into(), files, token: None }
    }

    /// A repo holding `files` (names may have folders: `Q4_K_M/x.gguf`).
    pub fn with_files(id: &str, files: Vec<(&str, Vec<u8>)>) -> HubRepo {
        let files = files.into_iter().map(|(n, b)| (n.to_string(), b)).collect();
        HubRepo { id: id.into(), sha: "0123456789abcdef0123456789abcdef01234567".into(), files, token: None }
    }
}

/// How a file's `GET` body misbehaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body {
    /// No Content-Length, and zeros after the file's bytes until the client
    /// hangs up (up to 8 GiB).
    Endless,
    /// A Content-Length of this many bytes, whatever the `HEAD` said.
    Claims(u64),
    /// The headers, then nothing (for 20 s).
    Stall,
    /// One byte every 100 ms.
    Trickle,
}

/// Shared state: the repos, what was asked, and the fault switches.
#[derive(Default)]
pub struct State {
    /// Repos by id.
    pub repos: BTreeMap<String, HubRepo>,
    /// `METHOD path range` of every request, in order.
    pub log: Vec<String>,
    /// Transfers of this file stop halfway.
    pub cut: Option<String>,
    /// Headers set on every `resolve` answer, replacing the normal ones of
    /// the same name (e.g. a hostile `ETag` or `X-Repo-Commit`).
    pub headers: Vec<(String, String)>,
    /// The commit the repo listing names instead of the repo's.
    pub listing_sha: Option<String>,
    /// The listing's body trickles, one byte every 100 ms.
    pub slow_listing: bool,
    /// Every `resolve` request is answered with a redirect to itself.
    pub redirect_loop: bool,
    /// This file's `GET` body misbehaves so.
    pub body: Option<(String, Body)>,
}

/// The running server; stopped when dropped.
pub struct HubServer {
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    /// Its state (change `cut`, read `log`).
    pub state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    port: u16,
}

impl HubServer {
    /// Starts serving `repos`.
    pub fn start(repos: Vec<HubRepo>) -> HubServer {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(State {
            repos: repos.into_iter().map(|r| (r.id.clone(), r)).collect(),
            ..State::default()
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, sp) = (state.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            for conn in l.incoming() {
                if sp.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(c) = conn {
                    let st = st.clone();
                    std::thread::spawn(move || {
                        let _ = serve(c, &st);
                    });
                }
            }
        });
        HubServer { endpoint: format!("http://127.0.0.1:{port}"), state, stop, thread: Some(thread), port }
    }

    /// The request log so far.
    pub fn log(&self) -> Vec<String> {
        self.state.lock().unwrap().log.clone()
    }

    /// Stops the server (connections are then refused).
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for HubServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn serve(mut c: TcpStream, st: &Mutex<State>) -> std::io::Result<()> {
    let mut r = BufReader::new(c.try_clone()?);
    let mut line = String::new();
    r.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or("").to_string(), parts.next().unwrap_or("").to_string());
    let mut headers = BTreeMap::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let range = headers.get("range").cloned();
    let auth = headers.get("authorization").cloned();
    let (repos, cut, forced, listing_sha, slow_listing, redirect_loop, bad_body) = {
        let mut s = st.lock().unwrap();
        s.log.push(format!("{method} {path} {}", range.clone().unwrap_or_default()));
        (
            s.repos.clone(),
            s.cut.clone(),
            s.headers.clone(),
            s.listing_sha.clone(),
            s.slow_listing,
            s.redirect_loop,
            s.body.clone(),
        )
    };
    let path = path.split('?').next().unwrap_or("").to_string();
    let find = |id: &str| repos.get(id);
    let denied = |repo: &HubRepo| repo.token.as_ref().is_some_and(|t| auth.as_deref() != Some(&format!("Bearer {t}")));
    // GET /api/models/{org}/{name}/revision/{rev}
    if let Some(rest) = path.strip_prefix("/api/models/") {
        let segs: Vec<&str> = rest.split('/').collect();
        // The file tree Python's huggingface_hub lists a snapshot with.
        if segs.len() >= 4 && segs[2] == "tree" {
            let id = format!("{}/{}", segs[0], segs[1]);
            return match find(&id) {
                Some(repo) if !denied(repo) => {
                    let items: Vec<_> = repo
                        .files
                        .iter()
                        .map(|(f, d)| serde_json::json!({"type": "file", "path": f, "size": d.len(), "oid": format!("{:040x}", fnv(d))}))
                        .collect();
                    let body = serde_json::Value::Array(items).to_string();
                    reply(&mut c, 200, "OK", &[("Content-Type", "application/json".into())], body.as_bytes())
                }
                _ => reply(&mut c, 404, "Not Found", &[], br#"{"error":"Repository not found"}"#),
            };
        }
        if segs.len() >= 4 && segs[2] == "revision" {
            let id = format!("{}/{}", segs[0], segs[1]);
            return match find(&id) {
                None => reply(&mut c, 404, "Not Found", &[], br#"{"error":"Repository not found"}"#),
                Some(repo) if denied(repo) => {
                    reply(&mut c, 401, "Unauthorized", &[], br#"{"error":"Invalid credentials"}"#)
                }
                Some(repo) if segs[3] != "main" && segs[3] != repo.sha => {
                    reply(&mut c, 404, "Not Found", &[], br#"{"error":"Revision not found"}"#)
                }
                Some(repo) => {
                    let siblings: Vec<_> = repo.files.keys().map(|f| serde_json::json!({"rfilename": f})).collect();
                    let sha = listing_sha.unwrap_or_else(|| repo.sha.clone());
                    let body = serde_json::json!({"id": id, "sha": sha, "siblings": siblings}).to_string();
                    let h = [("Content-Type", "application/json".to_string())];
                    if slow_listing {
                        return reply_trickle(&mut c, &h, body.as_bytes());
                    }
                    reply(&mut c, 200, "OK", &h, body.as_bytes())
                }
            };
        }
    }
    // GET|HEAD /{org}/{name}/resolve/{rev}/{file}
    let segs: Vec<&str> = path.trim_start_matches('/').splitn(5, '/').collect();
    if segs.len() == 5 && segs[2] == "resolve" {
        if redirect_loop {
            // Relative, to itself: a client that follows it without a cap never stops.
            return reply(&mut c, 302, "Found", &[("Location", path.clone())], b"");
        }
        let id = format!("{}/{}", segs[0], segs[1]);
        let Some(repo) = find(&id) else { return reply(&mut c, 404, "Not Found", &[], b"Repository not found") };
        if denied(repo) {
            return reply(&mut c, 401, "Unauthorized", &[], b"Invalid credentials");
        }
        if segs[3] != "main" && segs[3] != repo.sha {
            return reply(&mut c, 404, "Not Found", &[], b"Revision not found");
        }
        let Some(data) = repo.files.get(segs[4]) else {
            return reply(&mut c, 404, "Not Found", &[], b"Entry not found");
        };
        let etag = format!("\"{}\"", etag_of(data));
        let mut h = vec![("ETag", etag), ("X-Repo-Commit", repo.sha.clone()), ("Accept-Ranges", "bytes".into())];
        let size = data.len();
        let (start, end) = match range.as_deref().and_then(|r| r.strip_prefix("bytes=")) {
            Some(r) => {
                let (a, b) = r.split_once('-').unwrap_or((r, ""));
                let a: usize = a.parse().unwrap_or(0);
                let b: usize = if b.is_empty() { size.saturating_sub(1) } else { b.parse().unwrap_or(size - 1) };
                (a.min(size), b.min(size.saturating_sub(1)))
            }
            None => (0, size.saturating_sub(1)),
        };
        let body = if size == 0 { &data[..] } else { &data[start..=end] };
        if range.is_some() {
            h.push(("Content-Range", format!("bytes {start}-{end}/{size}")));
        }
        let (code, why) = if range.is_some() { (206, "Partial Content") } else { (200, "OK") };
        for (k, v) in &forced {
            h.retain(|(n, _)| !n.eq_ignore_ascii_case(k));
            h.push((k.as_str(), v.clone()));
        }
        if method == "HEAD" {
            h.push(("Content-Length", size.to_string()));
            return head(&mut c, code, why, &h);
        }
        match bad_body {
            Some((f, Body::Endless)) if f == segs[4] => return reply_endless(&mut c, code, why, &h, body),
            Some((f, Body::Claims(n))) if f == segs[4] => {
                h.push(("Content-Length", n.to_string()));
                head(&mut c, code, why, &h)?;
                return c.write_all(body);
            }
            Some((f, Body::Stall)) if f == segs[4] => {
                h.push(("Content-Length", body.len().to_string()));
                head(&mut c, code, why, &h)?;
                c.flush()?;
                std::thread::sleep(std::time::Duration::from_secs(20));
                return Ok(());
            }
            Some((f, Body::Trickle)) if f == segs[4] => return reply_trickle(&mut c, &h, body),
            _ => {}
        }
        // The fault: a transfer of more than one byte stops halfway.
        if cut.as_deref() == Some(segs[4]) && body.len() > 1 {
            return reply_cut(&mut c, code, why, &h, body);
        }
        return reply(&mut c, code, why, &h, body);
    }
    reply(&mut c, 404, "Not Found", &[], b"Not Found")
}

/// The ETag the server gives a file (and so its blob's name in the cache).
pub fn etag_of(data: &[u8]) -> String {
    format!("{:016x}{:024x}", fnv(data), data.len())
}

fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf29ce484222325u64, |h, &x| (h ^ x as u64).wrapping_mul(0x100000001b3))
}

fn head(c: &mut TcpStream, code: u16, why: &str, h: &[(&str, String)]) -> std::io::Result<()> {
    let mut s = format!("HTTP/1.1 {code} {why}\r\nConnection: close\r\n");
    for (k, v) in h {
        s.push_str(&format!("{k}: {v}\r\n"));
    }
    s.push_str("\r\n");
    c.write_all(s.as_bytes())
}

fn reply(c: &mut TcpStream, code: u16, why: &str, h: &[(&str, String)], body: &[u8]) -> std::io::Result<()> {
    let mut h = h.to_vec();
    h.push(("Content-Length", body.len().to_string()));
    head(c, code, why, &h)?;
    c.write_all(body)?;
    c.flush()
}

fn reply_cut(c: &mut TcpStream, code: u16, why: &str, h: &[(&str, String)], body: &[u8]) -> std::io::Result<()> {
    let mut h = h.to_vec();
    h.push(("Content-Length", body.len().to_string()));
    head(c, code, why, &h)?;
    c.write_all(&body[..body.len() / 2])?;
    c.flush()?;
    c.shutdown(std::net::Shutdown::Both)
}

/// A body with no Content-Length that never ends: `body`, then zeros until
/// the client hangs up (8 GiB at most).
fn reply_endless(c: &mut TcpStream, code: u16, why: &str, h: &[(&str, String)], body: &[u8]) -> std::io::Result<()> {
    head(c, code, why, h)?;
    c.write_all(body)?;
    let zeros = vec![0u8; 64 << 10];
    for _ in 0..(8u64 << 30) / zeros.len() as u64 {
        c.write_all(&zeros)?;
    }
    Ok(())
}

/// A 200 answer whose body comes one byte every 100 ms.
fn reply_trickle(c: &mut TcpStream, h: &[(&str, String)], body: &[u8]) -> std::io::Result<()> {
    let mut h = h.to_vec();
    h.push(("Content-Length", body.len().to_string()));
    head(c, 200, "OK", &h)?;
    for b in body {
        c.write_all(&[*b])?;
        c.flush()?;
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    Ok(())
}

/// Reads a whole response from `url` (for sanity checks in tests).
pub fn get(url: &str) -> (u16, Vec<u8>) {
    let u = url.strip_prefix("http://").unwrap();
    let (host, path) = u.split_once('/').unwrap();
    let mut s = TcpStream::connect(host).unwrap();
    write!(s, "GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).unwrap();
    let text = String::from_utf8_lossy(&buf);
    let code = text.split_whitespace().nth(1).unwrap().parse().unwrap();
    let at = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    (code, buf[at..].to_vec())
}
