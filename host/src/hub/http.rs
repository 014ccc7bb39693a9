//! HTTP to the hub: the repo listing, a file's metadata (a `HEAD`), and a
//! bounded download. One `ureq` agent per use, each with connect, read and
//! write timeouts and a redirect cap; every body is counted, so nothing
//! longer than what was announced is written, and a body that stalls or
//! trickles fails instead of hanging.

use famlx_formats::hub as check;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde::Deserialize;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

/// The most redirects one request follows.
pub const MAX_REDIRECTS: u32 = 10;
/// The largest repo listing read (a listing of 100,000 files is ~10 MiB).
pub const MAX_LISTING: u64 = 32 << 20;
/// A body slower than this (bytes a second, over a window of the timeout)
/// fails: a server trickling bytes would otherwise never trip the read
/// timeout.
pub const MIN_RATE: u64 = 1024;

/// What a URL path part keeps unescaped (RFC 3986's unreserved characters),
/// as `huggingface_hub` quotes revisions and file names.
const PART: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');

/// Why a request failed.
#[derive(Debug)]
pub enum Failure {
    /// The server answered this HTTP status.
    Status(u16),
    /// No answer: DNS, connection refused, nothing within the timeout.
    Unreachable(String),
    /// A body broke off, stalled or trickled after some bytes came; what
    /// came is kept and the next attempt resumes it.
    Cut(String),
    /// The answer is refused (a hostile or broken header, a body longer than
    /// announced, too many redirects): what was written of it is dropped.
    Refused(String),
    /// Writing on this machine failed.
    Local(String),
}

/// The repo listing (`/api/models/{repo}/revision/{revision}`): the commit
/// the revision is at and the repo's files.
#[derive(Debug, Deserialize)]
pub struct Listing {
    /// The commit (checked by the caller before use).
    pub sha: String,
    /// The files.
    pub siblings: Vec<Sibling>,
}

/// One file of a [`Listing`].
#[derive(Debug, Deserialize)]
pub struct Sibling {
    /// Its path in the repo (checked by the caller before use).
    pub rfilename: String,
}

/// A file's metadata from its `HEAD`: checked digest and size, and the URL to
/// download it from.
#[derive(Debug)]
pub struct Meta {
    /// The blob name: the sha1 or sha256 hex the ETag names.
    pub etag: String,
    /// The byte count announced (`X-Linked-Size`, or `Content-Length`).
    pub size: u64,
    /// Where to `GET` it (the resolve URL after relative redirects).
    pub url: String,
}

/// A client for one hub endpoint.
pub struct Client {
    endpoint: String,
    token: Option<String>,
    timeout: Duration,
    /// Follows no redirect (the `HEAD`, which stops at the first one to a
    /// CDN, as `huggingface_hub` does).
    direct: ureq::Agent,
    /// Follows up to [`MAX_REDIRECTS`]; the token goes only to the same host.
    follow: ureq::Agent,
}

impl Client {
    /// A client for `endpoint` (no trailing `/`), sending `token` if any,
    /// with `timeout` for connecting and for each read or write.
    pub fn new(endpoint: &str, token: Option<String>, timeout: Duration) -> Client {
        let agent = |redirects| {
            ureq::AgentBuilder::new()
                .try_proxy_from_env(true)
                .user_agent(concat!("famlx/", env!("CARGO_PKG_VERSION")))
                .timeout_connect(timeout)
                .timeout_read(timeout)
                .timeout_write(timeout)
                .redirects(redirects)
                .redirect_auth_headers(ureq::RedirectAuthHeaders::SameHost)
                .build()
        };
        Client { endpoint: endpoint.to_string(), token, timeout, direct: agent(0), follow: agent(MAX_REDIRECTS) }
    }

    /// The endpoint, for messages.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    fn request(&self, agent: &ureq::Agent, method: &str, url: &str) -> ureq::Request {
        // Bytes as stored: a compressed transfer would not match the announced size.
        let r = agent.request(method, url).set("Accept-Encoding", "identity");
        match &self.token {
            Some(t) => r.set("Authorization", &format!("Bearer {t}")),
            None => r,
        }
    }

    /// The listing of `repo` (checked by the caller) at `revision` (checked).
    pub fn listing(&self, repo: &str, revision: &str) -> Result<Listing, Failure> {
        let url = format!("{}/api/models/{repo}/revision/{}", self.endpoint, utf8_percent_encode(revision, PART));
        // An overall deadline too: the listing is small, its reads are not
        // allowed to trickle on for long.
        let r =
            self.request(&self.follow, "GET", &url).timeout(self.timeout * 4).call().map_err(|e| self.failure(e))?;
        let mut body = Vec::new();
        copy_bounded(r.into_reader(), &mut body, MAX_LISTING, self.timeout).map_err(|e| match e {
            Copy::Over => Failure::Refused(format!("the repo listing is larger than {} MiB", MAX_LISTING >> 20)),
            e => self.copy_failure(e, "the repo listing"),
        })?;
        serde_json::from_slice(&body)
            .map_err(|e| Failure::Refused(format!("the repo listing is not what the hub sends: {e}")))
    }

    /// The resolve URL of `file` of `repo` at `commit` (all checked).
    fn resolve_url(&self, repo: &str, commit: &str, file: &str) -> String {
        let file: Vec<String> = file.split('/').map(|p| utf8_percent_encode(p, PART).to_string()).collect();
        format!("{}/{repo}/resolve/{commit}/{}", self.endpoint, file.join("/"))
    }

    /// `HEAD` of `file` of `repo` at `commit`: its blob name and size, each
    /// checked (a hostile ETag or size is refused here), and the commit the
    /// server names, which must be `commit` if given. Relative redirects
    /// (a renamed repo) are followed, up to [`MAX_REDIRECTS`]; one to another
    /// host (the CDN) ends the walk, as in `huggingface_hub`.
    pub fn head(&self, repo: &str, commit: &str, file: &str) -> Result<Meta, Failure> {
        let mut url = self.resolve_url(repo, commit, file);
        let mut hops = 0;
        let r = loop {
            let r =
                self.request(&self.direct, "HEAD", &url).timeout(self.timeout).call().map_err(|e| self.failure(e))?;
            let Some(next) = r.header("Location").filter(|_| (300..400).contains(&r.status())) else { break r };
            let next = url::Url::parse(&url)
                .and_then(|u| u.join(next))
                .map_err(|_| Failure::Refused(format!("a redirect to {} is not a URL", check::shown(next))))?;
            let same = url::Url::parse(&url).is_ok_and(|u| u.origin() == next.origin());
            if !same {
                break r;
            }
            hops += 1;
            if hops > MAX_REDIRECTS {
                return Err(Failure::Refused(format!("more than {MAX_REDIRECTS} redirects")));
            }
            url = next.to_string();
        };
        // The checker's line names what it checked (ETag, commit, size); the
        // header it came from is added where that says more.
        let refused = |h: &'static str| {
            move |e: famlx_formats::Error| {
                Failure::Refused(if h == "ETag" { e.to_string() } else { format!("{h}: {e}") })
            }
        };
        if let Some(c) = r.header("X-Repo-Commit") {
            let c = check::commit(c.trim()).map_err(refused("X-Repo-Commit"))?;
            if c != commit {
                return Err(Failure::Refused(format!("X-Repo-Commit names commit {c}, the repo listing {commit}")));
            }
        }
        let (name, tag) = match r.header("X-Linked-Etag") {
            Some(t) => ("X-Linked-Etag", t),
            None => ("ETag", r.header("ETag").ok_or_else(|| Failure::Refused("no ETag".into()))?),
        };
        let etag = check::etag(tag).map_err(refused(name))?.to_string();
        // A redirect's own Content-Length is its body's, not the file's.
        let (name, size) = match r.header("X-Linked-Size") {
            Some(s) => ("X-Linked-Size", s),
            None => match r.header("Content-Length").filter(|_| r.status() < 300) {
                Some(s) => ("Content-Length", s),
                None => return Err(Failure::Refused("no size (X-Linked-Size or Content-Length)".into())),
            },
        };
        let size = check::size(size).map_err(refused(name))?;
        Ok(Meta { etag, size, url })
    }

    /// Downloads `meta.url` onto the end of `out` (opened for appending; its
    /// length is what an earlier attempt got) until it holds `meta.size`
    /// bytes. A server that ignores the range starts `out` over; one that
    /// announces or sends more than `meta.size` is refused.
    pub fn download(
        &self,
        meta: &Meta,
        out: &mut std::fs::File,
        bar: Option<&indicatif::ProgressBar>,
    ) -> Result<(), Failure> {
        let local = |e: std::io::Error| Failure::Local(e.to_string());
        let mut from = out.metadata().map_err(local)?.len();
        let mut req = self.request(&self.follow, "GET", &meta.url);
        if from > 0 {
            req = req.set("Range", &format!("bytes={from}-"));
        }
        let r = req.call().map_err(|e| self.failure(e))?;
        match r.status() {
            206 => {
                let (start, total) = content_range(r.header("Content-Range"))?;
                if start != from || total.is_some_and(|t| t != meta.size) {
                    return Err(Failure::Refused(format!(
                        "asked for bytes {from}- of {}, the server sent {}",
                        meta.size,
                        check::shown(r.header("Content-Range").unwrap_or(""))
                    )));
                }
            }
            200 => {
                // The range was ignored: the whole file comes again.
                out.set_len(0).map_err(local)?;
                from = 0;
            }
            s => return Err(Failure::Refused(format!("answered {s} to a download"))),
        }
        let want = meta.size - from;
        if let Some(n) = r.header("Content-Length") {
            let n = check::size(n).map_err(|e| Failure::Refused(e.to_string()))?;
            if n != want {
                return Err(Failure::Refused(format!(
                    "the server sends {n} bytes where {want} of the {} announced remain",
                    meta.size
                )));
            }
        }
        if let Some(b) = bar {
            b.set_position(from);
        }
        let copied =
            copy_bounded(r.into_reader(), &mut Counted { out, bar }, want, self.timeout).map_err(|e| match e {
                Copy::Over => {
                    Failure::Refused(format!("the server sent more than the {} bytes it announced", meta.size))
                }
                e => self.copy_failure(e, "the transfer"),
            })?;
        let got = from + copied;
        if got < meta.size {
            return Err(Failure::Cut(format!("the transfer stopped at {got} of {} bytes", meta.size)));
        }
        Ok(())
    }

    fn failure(&self, e: ureq::Error) -> Failure {
        match e {
            ureq::Error::Status(code, _) => Failure::Status(code),
            ureq::Error::Transport(t) => {
                let msg = one_line(&t.to_string());
                match t.kind() {
                    ureq::ErrorKind::TooManyRedirects => {
                        Failure::Refused(format!("more than {MAX_REDIRECTS} redirects"))
                    }
                    ureq::ErrorKind::Dns | ureq::ErrorKind::ConnectionFailed | ureq::ErrorKind::ProxyConnect => {
                        Failure::Unreachable(msg)
                    }
                    ureq::ErrorKind::Io if msg.contains("timed out") => Failure::Unreachable(format!(
                        "no answer within {} s (FAMLX_HUB_TIMEOUT_SECS): {msg}",
                        self.timeout.as_secs_f64()
                    )),
                    ureq::ErrorKind::Io => Failure::Unreachable(msg),
                    _ => Failure::Refused(msg),
                }
            }
        }
    }

    fn copy_failure(&self, e: Copy, what: &str) -> Failure {
        let t = self.timeout.as_secs_f64();
        match e {
            Copy::Over => Failure::Refused(format!("{what} is longer than announced")),
            Copy::Stalled(n) => {
                Failure::Cut(format!("{what} stalled after {n} bytes: no data for {t} s (FAMLX_HUB_TIMEOUT_SECS)"))
            }
            Copy::Slow(n) => Failure::Cut(format!(
                "{what} is slower than {} KiB/s over {t} s (FAMLX_HUB_TIMEOUT_SECS), after {n} bytes",
                MIN_RATE >> 10
            )),
            Copy::Broke(n, why) => Failure::Cut(format!("{what} broke off after {n} bytes: {why}")),
            Copy::Write(why) => Failure::Local(why),
        }
    }
}

/// `bytes START-END/TOTAL` → (START, TOTAL unless `*`).
fn content_range(h: Option<&str>) -> Result<(u64, Option<u64>), Failure> {
    let bad =
        || Failure::Refused(format!("Content-Range {} is not `bytes START-END/TOTAL`", check::shown(h.unwrap_or(""))));
    let rest = h.and_then(|h| h.trim().strip_prefix("bytes ")).ok_or_else(bad)?;
    let (span, total) = rest.split_once('/').ok_or_else(bad)?;
    let (start, _) = span.split_once('-').ok_or_else(bad)?;
    let start = check::size(start).map_err(|_| bad())?;
    let total = if total.trim() == "*" { None } else { Some(check::size(total).map_err(|_| bad())?) };
    Ok((start, total))
}

/// Why a bounded copy stopped early.
enum Copy {
    /// More bytes came than the limit.
    Over,
    /// No byte within the timeout (after this many).
    Stalled(u64),
    /// Bytes came slower than [`MIN_RATE`] over a timeout's window.
    Slow(u64),
    /// The connection failed (after this many bytes).
    Broke(u64, String),
    /// Writing failed.
    Write(String),
}

/// Copies at most `limit` bytes of `r` into `out`, failing as soon as a
/// byte past `limit` comes; a read that waits longer than `timeout`, or a
/// window of `timeout` in which fewer than [`MIN_RATE`] bytes a second came,
/// ends it. Returns the bytes copied (fewer than `limit` when the body ended
/// early; the caller decides whether that is a failure).
fn copy_bounded(mut r: impl Read, out: &mut impl Write, limit: u64, timeout: Duration) -> Result<u64, Copy> {
    let mut buf = vec![0u8; 64 << 10];
    let mut got = 0u64;
    let (mut window, mut in_window) = (Instant::now(), 0u64);
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) => return Ok(got),
            Ok(n) => n as u64,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock) => {
                return Err(Copy::Stalled(got))
            }
            Err(e) => return Err(Copy::Broke(got, one_line(&e.to_string()))),
        };
        if got + n > limit {
            return Err(Copy::Over);
        }
        out.write_all(&buf[..n as usize]).map_err(|e| Copy::Write(e.to_string()))?;
        got += n;
        in_window += n;
        let spent = window.elapsed();
        if spent >= timeout {
            if (in_window as f64) < MIN_RATE as f64 * spent.as_secs_f64() && got < limit {
                return Err(Copy::Slow(got));
            }
            (window, in_window) = (Instant::now(), 0);
        }
    }
}

/// A file being downloaded into, moving the progress bar as bytes land.
struct Counted<'a> {
    out: &'a mut std::fs::File,
    bar: Option<&'a indicatif::ProgressBar>,
}

impl Write for Counted<'_> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let n = self.out.write(b)?;
        if let Some(bar) = self.bar {
            bar.inc(n as u64);
        }
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// `s` with its line breaks turned into spaces (an error is one line).
pub fn one_line(s: &str) -> String {
    s.split(['\r', '\n']).filter(|l| !l.trim().is_empty()).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that gives `chunks` and then ends.
    struct Chunks(Vec<Vec<u8>>);
    impl Read for Chunks {
        fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
            if self.0.is_empty() {
                return Ok(0);
            }
            let c = self.0.remove(0);
            b[..c.len()].copy_from_slice(&c);
            Ok(c.len())
        }
    }

    #[test]
    fn a_copy_stops_at_the_first_byte_past_its_limit() {
        let mut out = Vec::new();
        let r =
            copy_bounded(Chunks(vec![vec![1; 700], vec![2; 25], vec![3; 1]]), &mut out, 725, Duration::from_secs(5));
        assert!(matches!(r, Err(Copy::Over)));
        assert_eq!(out.len(), 725, "nothing past the limit is written");
        let mut out = Vec::new();
        assert!(matches!(copy_bounded(Chunks(vec![vec![1; 700]]), &mut out, 725, Duration::from_secs(5)), Ok(700)));
    }

    #[test]
    fn content_ranges() {
        assert_eq!(content_range(Some("bytes 5-9/10")).ok(), Some((5, Some(10))));
        assert_eq!(content_range(Some("bytes 5-9/*")).ok(), Some((5, None)));
        for bad in [None, Some("5-9/10"), Some("bytes -1-9/10"), Some("bytes 5-9")] {
            assert!(content_range(bad).is_err(), "{bad:?}");
        }
    }
}
