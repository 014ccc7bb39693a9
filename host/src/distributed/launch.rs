//! `famlx launch`: starts the ranks of a distributed run as `mlx.launch`
//! does (same hostfile, same environment variables, so either launcher
//! starts famlx ranks), locally or over ssh, and watches them: when one
//! fails, the others are stopped and the failure is named in one line.

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// One host of a hostfile: where to ssh, and the addresses ranks talk over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// The name to ssh into.
    pub ssh: String,
    /// The IPs the ring backend listens on.
    pub ips: Vec<String>,
}

/// What `famlx launch` was asked to do.
#[derive(Debug, Clone)]
pub struct LaunchOptions {
    /// The hosts, one rank each, in rank order.
    pub hosts: Vec<Host>,
    /// `ring`, `nccl` or `mpi`.
    pub backend: String,
    /// Extra `KEY=VALUE` variables for every rank.
    pub env: Vec<String>,
    /// First ring port (`None`: free local ports when every host is local, else 32323).
    pub starting_port: Option<u16>,
    /// NCCL's rendezvous port.
    pub nccl_port: u16,
    /// Working directory of remote ranks.
    pub cwd: Option<PathBuf>,
    /// The famlx binary the ranks run.
    pub famlx: PathBuf,
    /// The famlx subcommand and its flags.
    pub command: Vec<String>,
}

/// Parses an `mlx.launch` hostfile: a JSON list of `{"ssh", "ips"}`, or an
/// object with `hosts` and optionally `backend` and `envs`. Returns the
/// hosts, the backend it names and its variables.
pub fn read_hostfile(path: &Path) -> Result<(Vec<Host>, Option<String>, Vec<String>)> {
    let text = famlx_formats::input::read_input_text(path, "a hostfile", famlx_formats::input::MAX_TEXT)
        .with_context(|| format!("{}: cannot read", path.display()))?;
    let v: Value = serde_json::from_str(&text).map_err(|e| anyhow!("{}: invalid JSON: {e}", path.display()))?;
    let bad = |what: &str| anyhow!("{}: {what}", path.display());
    let (hosts, backend, envs) = match &v {
        Value::Array(_) => (&v, None, Vec::new()),
        Value::Object(o) => {
            let hosts = o.get("hosts").ok_or_else(|| bad("missing field `hosts`"))?;
            let backend = o.get("backend").and_then(Value::as_str).filter(|b| !b.is_empty()).map(String::from);
            let envs = match o.get("envs") {
                None => Vec::new(),
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|e| e.as_str().map(String::from).ok_or_else(|| bad("field `envs` must list strings")))
                    .collect::<Result<_>>()?,
                Some(_) => return Err(bad("field `envs` must list strings")),
            };
            (hosts, backend, envs)
        }
        _ => return Err(bad("expected a list of hosts or an object with `hosts`")),
    };
    let list = hosts.as_array().ok_or_else(|| bad("field `hosts` must be a list"))?;
    if list.is_empty() {
        return Err(bad("no hosts"));
    }
    let hosts = list
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let ssh = h.get("ssh").and_then(Value::as_str).ok_or_else(|| bad(&format!("host {i}: missing `ssh`")))?;
            let ips = match h.get("ips") {
                None => Vec::new(),
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|x| {
                        x.as_str().map(String::from).ok_or_else(|| bad(&format!("host {i}: `ips` must list strings")))
                    })
                    .collect::<Result<_>>()?,
                Some(_) => return Err(bad(&format!("host {i}: `ips` must list strings"))),
            };
            Ok(Host { ssh: ssh.to_string(), ips })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((hosts, backend, envs))
}

/// `hosts` (comma-separated) each repeated `n` times, as `mlx.launch
/// --hosts … -n …` lists them; an IP is also the host's address.
pub fn host_list(hosts: &str, n: usize) -> Result<Vec<Host>> {
    let mut out = Vec::new();
    for h in hosts.split(',') {
        if h.is_empty() {
            bail!("--hosts: a host name is empty");
        }
        let ips = if h.parse::<std::net::IpAddr>().is_ok() { vec![h.to_string()] } else { Vec::new() };
        out.extend((0..n).map(|_| Host { ssh: h.to_string(), ips: ips.clone() }));
    }
    Ok(out)
}

fn is_local(h: &Host) -> bool {
    matches!(h.ssh.as_str(), "127.0.0.1" | "localhost" | "::1")
}

fn free_ports(n: usize) -> Result<Vec<u16>> {
    let held: Vec<TcpListener> = (0..n).map(|_| TcpListener::bind("127.0.0.1:0")).collect::<std::io::Result<_>>()?;
    Ok(held.iter().map(|l| l.local_addr().map(|a| a.port())).collect::<std::io::Result<_>>()?)
}

/// Each rank's environment (beyond `o.env`): what `mlx.launch` sets for the backend.
fn rank_env(o: &LaunchOptions) -> Result<Vec<Vec<(String, String)>>> {
    let n = o.hosts.len();
    let all_local = o.hosts.iter().all(is_local);
    let mut common: Vec<(String, String)> = vec![("FAMLX_BACKEND".into(), o.backend.clone())];
    match o.backend.as_str() {
        "ring" => {
            if o.hosts.iter().any(|h| h.ips.is_empty()) {
                bail!("the ring backend needs IP addresses for every host (`ips` in the hostfile, or IPs in --hosts)");
            }
            let ports = match o.starting_port {
                Some(p) => (0..n as u16).map(|i| p + i).collect(),
                None if all_local => free_ports(n)?,
                None => (0..n as u16).map(|i| 32323 + i).collect(),
            };
            let ring: Vec<Vec<String>> =
                o.hosts.iter().zip(&ports).map(|(h, p)| vec![format!("{}:{p}", h.ips[0])]).collect();
            common.push(("MLX_HOSTFILE_JSON".into(), serde_json::to_string(&ring)?));
        }
        "nccl" => {
            let ip = o.hosts[0].ips.first().cloned().unwrap_or_else(|| o.hosts[0].ssh.clone());
            let port = if all_local && o.nccl_port == 0 { free_ports(1)?[0] } else { o.nccl_port };
            common.push(("NCCL_HOST_IP".into(), ip));
            common.push(("NCCL_PORT".into(), port.to_string()));
            common.push(("MLX_WORLD_SIZE".into(), n.to_string()));
        }
        other => {
            bail!("--backend {other}: famlx launch starts `ring` or `nccl` ranks (for MPI, run famlx under mpirun)")
        }
    }
    for e in &o.env {
        let (k, v) = e.split_once('=').ok_or_else(|| anyhow!("--env {e}: expected KEY=VALUE"))?;
        common.push((k.to_string(), v.to_string()));
    }
    // CUDA_VISIBLE_DEVICES: one GPU per rank of a host, in rank order.
    let mut seen: std::collections::HashMap<&str, usize> = Default::default();
    Ok(o.hosts
        .iter()
        .enumerate()
        .map(|(r, h)| {
            let mut env = common.clone();
            env.push(("MLX_RANK".into(), r.to_string()));
            let k = seen.entry(h.ssh.as_str()).or_default();
            if o.backend == "nccl" {
                env.push(("CUDA_VISIBLE_DEVICES".into(), k.to_string()));
            }
            *k += 1;
            env
        })
        .collect())
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// What every ssh the launcher runs is given before the host.
const SSH_OPTIONS: [&str; 4] = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=15"];

/// Set for a rank past 0 started through ssh: its stdin is a pipe from the
/// launcher, held open for as long as the launcher lives; the rank ends
/// when it closes.
pub const LAUNCHER_PIPE: &str = "FAMLX_LAUNCHER_PIPE";

/// Starts one rank: locally, or through ssh with its environment exported
/// in the remote shell. The ring hostfile travels as JSON and is written to
/// a temporary file where the rank runs.
fn spawn(o: &LaunchOptions, host: &Host, env: &[(String, String)], scratch: &Path, rank: usize) -> Result<Child> {
    if is_local(host) {
        let mut c = Command::new(&o.famlx);
        c.args(&o.command);
        for (k, v) in env {
            if k == "MLX_HOSTFILE_JSON" {
                let f = scratch.join("ring.json");
                if !f.exists() {
                    std::fs::write(&f, v)?;
                }
                c.env("MLX_HOSTFILE", &f);
            } else {
                c.env(k, v);
            }
        }
        if rank > 0 {
            c.stdin(Stdio::null());
        }
        c.stderr(Stdio::piped());
        die_with_parent(&mut c);
        return c.spawn().with_context(|| format!("cannot start {}", o.famlx.display()));
    }
    let mut env = env.to_vec();
    if rank > 0 {
        // The rank reads this pipe to its end, which comes when the
        // launcher is gone (see [`LAUNCHER_PIPE`]).
        env.push((LAUNCHER_PIPE.into(), "1".into()));
    }
    let script = remote_script(o, &env);
    let mut c = Command::new("ssh");
    // Never a password prompt (it would wait forever), and a bounded wait
    // for a host that does not answer: ssh then fails with status 255.
    c.args(SSH_OPTIONS).arg(&host.ssh).arg(script);
    if rank > 0 {
        c.stdin(Stdio::piped());
    }
    c.stderr(Stdio::piped());
    die_with_parent(&mut c);
    c.spawn().with_context(|| format!("cannot run ssh to {}", host.ssh))
}

/// The shell line a remote rank runs: into `--cwd`, its environment
/// exported (the ring hostfile written to a temporary file), then famlx
/// exec'd with the command; every value single-quoted.
fn remote_script(o: &LaunchOptions, env: &[(String, String)]) -> String {
    let mut script = String::new();
    if let Some(d) = &o.cwd {
        script += &format!("cd {} || exit 1; ", shell_quote(&d.display().to_string()));
    }
    for (k, v) in env {
        if k == "MLX_HOSTFILE_JSON" {
            script += &format!("f=$(mktemp); printf %s {} > $f; export MLX_HOSTFILE=$f; ", shell_quote(v));
        } else {
            script += &format!("export {k}={}; ", shell_quote(v));
        }
    }
    let cmd: Vec<String> = std::iter::once(o.famlx.display().to_string()).chain(o.command.iter().cloned()).collect();
    script += &format!("exec {}", cmd.iter().map(|a| shell_quote(a)).collect::<Vec<_>>().join(" "));
    script
}

/// Local ranks end with the launcher, even when it is killed.
fn die_with_parent(c: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe; it only sets this child's parent-death signal.
    unsafe {
        c.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
}

fn describe(s: ExitStatus) -> String {
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
struct Stderr {
    errors: Vec<Vec<String>>,
    muted: Vec<bool>,
}

type Shared = std::sync::Arc<std::sync::Mutex<Stderr>>;

fn forward(rank: usize, from: std::process::ChildStderr, to: Shared) -> std::thread::JoinHandle<()> {
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

/// Starts every rank and waits for them. When one fails the others get
/// SIGTERM (SIGKILL 5 s later), and the error is one line naming the rank
/// and why (its own error line, or how it died); all ending well is
/// success.
pub fn launch(o: &LaunchOptions) -> Result<()> {
    if o.command.is_empty() {
        bail!("famlx launch: give the famlx command to run after `--` (e.g. `-- generate --prompt hi`)");
    }
    let envs = rank_env(o)?;
    let scratch = std::env::temp_dir().join(format!("famlx-launch-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let n = o.hosts.len();
    let shared: Shared =
        std::sync::Arc::new(std::sync::Mutex::new(Stderr { errors: vec![Vec::new(); n], muted: vec![false; n] }));
    let mut kids: Vec<Option<Child>> = Vec::new();
    let mut readers = Vec::new();
    for (r, (h, env)) in o.hosts.iter().zip(&envs).enumerate() {
        match spawn(o, h, env, &scratch, r) {
            Ok(mut c) => {
                readers.push(c.stderr.take().map(|e| forward(r, e, shared.clone())));
                kids.push(Some(c));
            }
            Err(e) => {
                stop(&mut kids);
                return Err(e);
            }
        }
    }
    let failed = watch(&mut kids, &shared);
    for t in readers.into_iter().flatten() {
        let _ = t.join();
    }
    let _ = std::fs::remove_dir_all(&scratch);
    let Some((rank, status)) = failed? else { return Ok(()) };
    let errors = std::mem::take(&mut shared.lock().unwrap_or_else(|e| e.into_inner()).errors[rank]);
    let why = match errors.last() {
        // Its own line already says `rank N: …`.
        Some(e) => e.clone(),
        None if status.code() == Some(255) && !is_local(&o.hosts[rank]) => {
            format!(
                "rank {rank}: ssh to {} failed (exit status 255: it could not connect or log in)",
                o.hosts[rank].ssh
            )
        }
        None => format!("rank {rank} failed ({})", describe(status)),
    };
    bail!("{why}; the other ranks were stopped")
}

/// Waits for every rank; on the first failure stops the others and
/// returns the rank to blame: of those that failed within a moment of each
/// other, one that died of a signal (the others then lost their peer),
/// else the lowest.
fn watch(kids: &mut [Option<Child>], shared: &Shared) -> Result<Option<(usize, ExitStatus)>> {
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
fn stop(kids: &mut [Option<Child>]) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostfiles_in_both_shapes() {
        let d = std::env::temp_dir().join(format!("famlx-hostfile-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let list = d.join("list.json");
        std::fs::write(&list, r#"[{"ssh":"a","ips":["10.0.0.1"]},{"ssh":"b","ips":["10.0.0.2"]}]"#).unwrap();
        let (h, b, e) = read_hostfile(&list).unwrap();
        assert_eq!(h[1], Host { ssh: "b".into(), ips: vec!["10.0.0.2".into()] });
        assert_eq!((b, e.len()), (None, 0));
        let obj = d.join("obj.json");
        std::fs::write(&obj, r#"{"backend":"nccl","envs":["X=1"],"hosts":[{"ssh":"a"}]}"#).unwrap();
        let (h, b, e) = read_hostfile(&obj).unwrap();
        assert_eq!((h.len(), b.as_deref(), e), (1, Some("nccl"), vec!["X=1".to_string()]));
        std::fs::write(&obj, r#"{"hosts":[{"ips":[]}]}"#).unwrap();
        assert!(read_hostfile(&obj).unwrap_err().to_string().contains("host 0: missing `ssh`"));
        assert_eq!(host_list("127.0.0.1", 3).unwrap().len(), 3);
        assert!(host_list("a,,b", 1).is_err());
    }

    #[test]
    fn remote_ranks_get_mlx_launch_s_environment() {
        let hosts = vec![
            Host { ssh: "a".into(), ips: vec!["10.0.0.1".into()] },
            Host { ssh: "b".into(), ips: vec!["10.0.0.2".into()] },
        ];
        let o = LaunchOptions {
            hosts,
            backend: "ring".into(),
            env: vec!["X=it's".into()],
            starting_port: None,
            nccl_port: 12345,
            cwd: Some("/w d".into()),
            famlx: "/opt/famlx".into(),
            command: vec!["generate".into(), "--prompt".into(), "hi there".into()],
        };
        let envs = rank_env(&o).unwrap();
        let get = |r: usize, k: &str| envs[r].iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        // Remote hosts: mlx.launch's default ports, one per rank.
        assert_eq!(get(1, "MLX_HOSTFILE_JSON").unwrap(), r#"[["10.0.0.1:32323"],["10.0.0.2:32324"]]"#);
        assert_eq!(get(1, "MLX_RANK").as_deref(), Some("1"));
        assert_eq!(get(0, "FAMLX_BACKEND").as_deref(), Some("ring"));
        let script = remote_script(&o, &envs[1]);
        assert!(script.starts_with("cd '/w d' || exit 1; "), "{script}");
        assert!(script.contains("export MLX_RANK='1'; "), "{script}");
        assert!(script.contains(r"export X='it'\''s'; "), "{script}");
        assert!(script.contains("export MLX_HOSTFILE=$f; "), "{script}");
        assert!(script.ends_with("exec '/opt/famlx' 'generate' '--prompt' 'hi there'"), "{script}");
        // NCCL: the first host's address, world size, one GPU per rank of a host.
        let nccl = LaunchOptions { backend: "nccl".into(), ..o };
        let envs = rank_env(&nccl).unwrap();
        let get = |r: usize, k: &str| envs[r].iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(get(1, "NCCL_HOST_IP").as_deref(), Some("10.0.0.1"));
        assert_eq!(get(1, "MLX_WORLD_SIZE").as_deref(), Some("2"));
        assert_eq!(get(1, "CUDA_VISIBLE_DEVICES").as_deref(), Some("0"));
        assert!(rank_env(&LaunchOptions { backend: "mpi".into(), ..nccl }).is_err());
    }
}
