//! Running as one rank of a model split over several processes (MLX's
//! distributed layer): joining the group the launcher set up, and how this
//! process's part of the model is split. Every rank runs the same command
//! in lockstep (the collectives keep their logits equal, so their samplers
//! agree); rank 0 alone writes output. [`launch`] starts the ranks.

pub mod launch;
mod watch;

use anyhow::{anyhow, bail, Result};
use mlx::nn::{Parallel, ParallelMode};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::time::Duration;

static PARALLEL: OnceLock<Option<Parallel>> = OnceLock::new();

/// How this process's model is split (`None`: it runs alone, or
/// [`join`] was not called).
pub fn parallel() -> Option<Parallel> {
    PARALLEL.get().copied().flatten()
}

/// This process's rank (0 when alone).
pub fn rank() -> i32 {
    parallel().map_or(0, |p| p.rank)
}

/// This process's rank as the environment gives it (`RANK_VARS`),
/// before (or without) joining: 0 when absent.
pub fn rank_from_env() -> i32 {
    RANK_VARS.iter().find_map(|v| std::env::var(v).ok()).and_then(|r| r.parse().ok()).unwrap_or(0)
}

/// Where launchers put a process's rank: `mlx.launch` and `famlx launch`
/// (every backend), Open MPI's and MPICH's `mpirun`.
const RANK_VARS: [&str; 3] = ["MLX_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"];

/// Whether the environment says this process is one rank of a group (see
/// `RANK_VARS`).
pub fn launched() -> bool {
    RANK_VARS.iter().any(|v| std::env::var_os(v).is_some())
}

/// The backend the environment configures: `FAMLX_BACKEND` when set, else
/// NCCL's or the ring's variables, else `any`.
fn backend() -> String {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    if let Some(b) = env("FAMLX_BACKEND") {
        return b;
    }
    if env("NCCL_HOST_IP").is_some() {
        "nccl".into()
    } else if env("MLX_HOSTFILE").is_some() {
        "ring".into()
    } else if env("OMPI_COMM_WORLD_RANK").is_some() || env("PMI_RANK").is_some() {
        "mpi".into()
    } else {
        "any".into()
    }
}

/// How long a rank waits for every other rank to join
/// (`FAMLX_DIST_TIMEOUT` seconds, default 60).
fn join_timeout() -> Duration {
    let s = std::env::var("FAMLX_DIST_TIMEOUT").ok().and_then(|v| v.parse::<f64>().ok()).unwrap_or(60.0);
    Duration::from_secs_f64(s.max(0.1))
}

/// Joins the group the environment describes (see [`launched`]), splitting
/// the model by `mode`; nothing when the process runs alone. A peer that
/// does not join within the timeout is an error naming this rank, not a
/// hang. Later calls return the first call's result.
pub fn join(mode: ParallelMode) -> Result<Option<Parallel>> {
    if let Some(p) = PARALLEL.get() {
        return Ok(*p);
    }
    if !launched() {
        let _ = PARALLEL.set(None);
        return Ok(None);
    }
    let rank = rank_from_env();
    if std::env::var_os(launch::LAUNCHER_PIPE).is_some() {
        end_with_launcher(rank);
    }
    let backend = backend();
    if !mlx::distributed::is_available(&backend)? {
        bail!("rank {rank}: MLX has no `{backend}` distributed backend in this build");
    }
    // MLX's backends connect with retries and no deadline of their own.
    let (tx, rx) = mpsc::channel();
    let b = backend.clone();
    std::thread::spawn(move || {
        let _ = tx.send(mlx::distributed::init(&b, true));
    });
    let wait = join_timeout();
    let joined = rx.recv_timeout(wait);
    remove_temporary_hostfile();
    let g = match joined {
        Ok(r) => r.map_err(|e| anyhow!("rank {rank}: joining the {backend} group failed: {}", e.msg))?,
        Err(_) => bail!(
            "rank {rank}: the other ranks of the {backend} group could not be reached within {} s",
            wait.as_secs_f64()
        ),
    };
    let p = (g.size > 1).then_some(Parallel { mode, rank: g.rank, size: g.size });
    let _ = PARALLEL.set(p);
    if g.rank > 0 {
        quiet_stdout()?;
    }
    Ok(p)
}

/// Removes this rank's `MLX_HOSTFILE` where the launcher wrote it for this
/// rank alone ([`launch::HOSTFILE_IS_TEMPORARY`]): the backend read it when
/// it started joining, and nothing else will.
fn remove_temporary_hostfile() {
    if std::env::var_os(launch::HOSTFILE_IS_TEMPORARY).is_some() {
        if let Some(f) = std::env::var_os("MLX_HOSTFILE") {
            let _ = std::fs::remove_file(f);
        }
    }
}

/// Ends this process when its stdin closes: the connection to the launcher
/// is gone. ssh passes no signal on, so a launcher that ended or was
/// stopped would otherwise leave remote ranks running (a server's forever).
/// Only ranks past 0 are watched (rank 0 of a REPL reads its stdin); rank 0
/// then ends by losing its peers.
fn end_with_launcher(rank: i32) {
    std::thread::spawn(move || {
        use std::io::Read;
        let mut sink = [0u8; 256];
        let mut stdin = std::io::stdin();
        while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
        last_words(&format!("rank {rank}: the connection to the launcher closed, so this rank stops"));
        // No exit handlers: MLX's backend threads may be blocked on a peer.
        // SAFETY: _exit ends the process at once; nothing is used after it.
        unsafe { libc::_exit(1) };
    });
}

/// A rank's last `famlx: error:` line, written even where the launcher
/// has gone. Not eprintln!: stderr may then be a broken pipe, and a failed
/// print would panic the thread instead of ending the rank.
pub fn last_words(message: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "famlx: error: {message}");
}

/// Rank 0's `text` on every rank (`None`: rank 0 has no more), for input
/// only rank 0 reads (a REPL's lines): every rank must run the same turns.
/// Other ranks' `text` is ignored. Without a group, `text` itself.
pub fn broadcast_text(text: Option<&str>) -> Result<Option<String>> {
    let Some(p) = parallel() else { return Ok(text.map(String::from)) };
    let mine = if p.rank == 0 { text } else { None };
    // Each rank adds zeros to rank 0's values: the sum is rank 0's.
    let len = mine.map_or(-1, |t| t.len() as i32);
    let len = mlx::distributed::all_sum(&mlx::Array::from_slice(&[if p.rank == 0 { len } else { 0 }], &[1])?)?
        .to_vec::<i32>()?[0];
    if len < 0 {
        return Ok(None);
    }
    let bytes: Vec<i32> = match mine {
        Some(t) if p.rank == 0 => t.bytes().map(i32::from).collect(),
        _ => vec![0; len as usize],
    };
    if bytes.is_empty() {
        return Ok(Some(String::new()));
    }
    let got = mlx::distributed::all_sum(&mlx::Array::from_slice(&bytes, &[len])?)?.to_vec::<i32>()?;
    let got: Vec<u8> = got.into_iter().map(|b| b as u8).collect();
    Ok(Some(String::from_utf8(got).map_err(|_| anyhow!("rank 0's input did not arrive intact"))?))
}

/// An error for what does not run as ranks (yet): prompt-cache files
/// (a split model's caches are per rank) and hot reload.
pub fn refuse(command: &str) -> Result<()> {
    if launched() {
        bail!("`famlx {command}` does not run as ranks: run it in one process");
    }
    Ok(())
}

/// Points this process's stdout at /dev/null: ranks other than 0 compute
/// the same tokens, and only rank 0 prints them (errors still go to stderr).
fn quiet_stdout() -> Result<()> {
    use std::os::fd::AsRawFd;
    let null = std::fs::OpenOptions::new().write(true).open("/dev/null")?;
    // SAFETY: dup2 onto fd 1 replaces stdout; both descriptors are valid.
    if unsafe { libc::dup2(null.as_raw_fd(), 1) } < 0 {
        bail!("cannot silence stdout: {}", std::io::Error::last_os_error());
    }
    Ok(())
}
