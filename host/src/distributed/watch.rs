//! Watching the ranks a launch started: what they write to stderr, how
//! they end, and stopping the others when one fails.

use anyhow::{bail, Result};
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// How a rank ended, in words.
pub(super) fn describe(s: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(sig)) => format!("signal {sig}"),
        _ => s.to_string(),
    }
}

/// What the ranks wrote to stderr: rank 0's lines passed on as they come
/// (the others run the same command and say the same), except each rank's
/// `famlx: error:` lines, kept for the one line that ends a failed run;
/// once a rank has failed, the others' lines (the echoes of its failure)
/// are dropped.
#[derive(Default)]
pub(super) struct Stderr {
    /// Each rank's `famlx: error:` lines.
    pub(super) errors: Vec<Vec<String>>,
    /// Whose lines are dropped.
    muted: Vec<bool>,
}

/// [`Stderr`], shared by the threads reading the ranks' stderr.
pub(super) type Shared = std::sync::Arc<std::sync::Mutex<Stderr>>;

impl Stderr {
    /// The record of `n` ranks' stderr, none muted yet.
    pub(super) fn shared(n: usize) -> Shared {
        std::sync::Arc::new(std::sync::Mutex::new(Stderr { errors: vec![Vec::new(); n], muted: vec![false; n] }))
    }
}

/// Reads rank `rank`'s stderr `from` into `to` (see [`Stderr`]) on a thread.
pub(super) fn forward(rank: usize, from: std::process::ChildStderr, to: Shared) -> std::thread::JoinHandle<()> {
    use std::io::BufRead;
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(from).lines() {
            let Ok(line) = line else { break };
            let mut s = to.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(e) = line.strip_prefix("famlx: error: ") {
                s.errors[rank].push(e.to_string());
            } else if line.starts_with("[ring]") && std::env::var_os("MLX_RING_VERBOSE").is_none() {
                // MLX's ring backend narrating a lost peer: the echo of a
                // failure the launcher reports in one line.
            } else if rank == 0 && !s.muted[rank] {
                // The other ranks say the same (they run the same command).
                eprintln!("{line}");
            }
        }
    })
}

/// Waits for every rank; on the first failure stops the others and
/// returns the rank to blame: of those that failed within a moment of each
/// other, one that died of a signal (the others then lost their peer),
/// else the lowest.
pub(super) fn watch(kids: &mut [Option<Child>], shared: &Shared) -> Result<Option<(usize, ExitStatus)>> {
    forward_signals();
    let mut forwarded = false;
    loop {
        if !forwarded && STOP.load(std::sync::atomic::Ordering::SeqCst) {
            // SIGTERM or SIGINT here: the ranks get SIGTERM (a server's rank
            // 0 then finishes what it holds and closes the others) and the
            // launcher waits for them.
            forwarded = true;
            terminate(kids);
        }
        let mut running = 0;
        let mut failed = false;
        for c in kids.iter_mut() {
            let Some(child) = c.as_mut() else { continue };
            match child.try_wait()? {
                None => running += 1,
                Some(s) if s.success() => *c = None,
                Some(_) => failed = true,
            }
        }
        if failed && forwarded {
            stop(kids);
            bail!("stopped by a signal");
        }
        if failed {
            // The others' lines from here on are echoes of this failure.
            shared.lock().unwrap_or_else(|e| e.into_inner()).muted.iter_mut().for_each(|m| *m = true);
            std::thread::sleep(Duration::from_millis(300));
            let mut done: Vec<(usize, ExitStatus)> = Vec::new();
            for (r, c) in kids.iter_mut().enumerate() {
                if let Some(s) = c.as_mut().map(|c| c.try_wait()).transpose()?.flatten().filter(|s| !s.success()) {
                    done.push((r, s));
                }
            }
            let blame = blame(&done, &shared.lock().unwrap_or_else(|e| e.into_inner()).errors);
            if let Some((r, _)) = blame {
                let mut s = shared.lock().unwrap_or_else(|e| e.into_inner());
                for (i, m) in s.muted.iter_mut().enumerate() {
                    *m = i != r;
                }
            }
            stop(kids);
            return Ok(blame);
        }
        if running == 0 {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// SIGTERM and SIGINT set [`STOP`] instead of ending the launcher.
fn forward_signals() {
    // SAFETY: the handler only stores to an atomic (async-signal-safe).
    unsafe {
        libc::signal(libc::SIGTERM, on_stop as extern "C" fn(libc::c_int) as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_stop as extern "C" fn(libc::c_int) as libc::sighandler_t);
    }
}

/// Which of the ranks that failed together caused it: one killed by a
/// signal, else one whose error is its own (not a lost peer, the echo of
/// another's failure), else the lowest.
fn blame(done: &[(usize, ExitStatus)], errors: &[Vec<String>]) -> Option<(usize, ExitStatus)> {
    use std::os::unix::process::ExitStatusExt;
    let echo = |r: usize| errors[r].iter().any(|e| e.contains("peer"));
    done.iter()
        .find(|(_, s)| s.signal().is_some())
        .or_else(|| done.iter().find(|(r, _)| !echo(*r)))
        .or(done.first())
        .copied()
}

/// SIGTERM to every rank still held.
fn terminate(kids: &[Option<Child>]) {
    for c in kids.iter().flatten() {
        // SAFETY: signalling a child we started and have not reaped.
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
    }
}

/// Stops every rank still held: SIGTERM, then SIGKILL 5 s later.
pub(super) fn stop(kids: &mut [Option<Child>]) {
    terminate(kids);
    let deadline = Instant::now() + Duration::from_secs(5);
    for c in kids.iter_mut().flatten() {
        while Instant::now() < deadline && matches!(c.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = c.kill();
        let _ = c.wait();
    }
}
