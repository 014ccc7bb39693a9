//! `famlx launch`: starts the ranks of a distributed run as `mlx.launch`
//! does (same hostfile, same environment variables, so either launcher
//! starts famlx ranks), locally or over ssh, and watches them: when one
//! fails, the others are stopped and the failure is named in one line.
//!
//! A launch is bounded: at most [`MAX_RANKS`] ranks, ring ports that stay
//! within 1-65535, and the ring's hostfile (one line per rank) written once
//! to a private temporary folder that every local rank is pointed at and
//! that is removed when the launch ends, however it ends.

use super::watch::{describe, forward, stop, watch, Stderr};
use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The most ranks one launch starts (the hostfile, or `-n` times the
/// hosts). MLX's ring connects every rank to its neighbours over TCP and
/// the launcher holds a pipe and a thread per rank: far past this, a run
/// would fail on file-descriptor or port limits after a long start.
pub const MAX_RANKS: usize = 1024;

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
    if list.len() > MAX_RANKS {
        return Err(bad(&format!("{} hosts; famlx launch starts at most {MAX_RANKS} ranks", list.len())));
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
/// --hosts … -n …` lists them; an IP is also the host's address. At most
/// [`MAX_RANKS`] in all, checked before any is made.
pub fn host_list(hosts: &str, n: usize) -> Result<Vec<Host>> {
    let names: Vec<&str> = hosts.split(',').collect();
    if names.iter().any(|h| h.is_empty()) {
        bail!("--hosts: a host name is empty");
    }
    if n == 0 {
        bail!("-n: at least one rank per host");
    }
    if n.checked_mul(names.len()).is_none_or(|total| total > MAX_RANKS) {
        bail!(
            "-n {n} with {} host{}: famlx launch starts at most {MAX_RANKS} ranks",
            names.len(),
            if names.len() == 1 { "" } else { "s" }
        );
    }
    let mut out = Vec::with_capacity(n * names.len());
    for h in names {
        let ips = if h.parse::<std::net::IpAddr>().is_ok() { vec![h.to_string()] } else { Vec::new() };
        out.extend((0..n).map(|_| Host { ssh: h.to_string(), ips: ips.clone() }));
    }
    Ok(out)
}

/// Whether `h` is this machine (its ranks are started without ssh).
pub fn is_local(h: &Host) -> bool {
    matches!(h.ssh.as_str(), "127.0.0.1" | "localhost" | "::1")
}

/// `n` free ports on this machine, held together while they are picked so
/// none comes twice.
fn free_ports(n: usize) -> Result<Vec<u16>> {
    let why = |e: std::io::Error| anyhow!("cannot reserve {n} free local ports for the ring: {e}");
    let held: Vec<TcpListener> =
        (0..n).map(|_| TcpListener::bind("127.0.0.1:0")).collect::<std::io::Result<_>>().map_err(why)?;
    held.iter().map(|l| l.local_addr().map(|a| a.port())).collect::<std::io::Result<_>>().map_err(why)
}

/// `n` consecutive ports from `first`, which `flag` named: refused where
/// they would run past 65535 (or start at 0, which is no port).
fn consecutive_ports(first: u16, n: usize, flag: &str) -> Result<Vec<u16>> {
    if first == 0 {
        bail!("{flag} 0: give a port from 1 to 65535");
    }
    let last = first as usize + n.saturating_sub(1);
    if last > u16::MAX as usize {
        bail!("{flag} {first}: {n} ranks need ports {first}-{last}, past 65535; give a lower {flag}");
    }
    Ok((first..=last as u16).collect())
}

/// What the ranks' environments hold: the variables every rank shares and
/// the ring's hostfile once, not a copy of it per rank (it lists every
/// rank, so copies would grow with the square of the rank count).
#[derive(Debug)]
struct RankEnv {
    /// What every rank gets: `mlx.launch`'s variables for the backend, then `o.env`.
    common: Vec<(String, String)>,
    /// The ring backend's hostfile (JSON), one address per rank.
    ring: Option<String>,
    /// Each rank's place among the ranks of its host (its GPU under NCCL).
    local_index: Vec<usize>,
    /// Whether ranks get `MLX_RANK` (not for a single rank: a group of one
    /// is a plain process).
    grouped: bool,
    /// NCCL: ranks get `CUDA_VISIBLE_DEVICES`.
    nccl: bool,
}

impl RankEnv {
    /// Rank `r`'s own variables, after [`RankEnv::common`].
    fn own(&self, r: usize) -> Vec<(String, String)> {
        let mut env = Vec::new();
        if self.grouped {
            env.push(("MLX_RANK".into(), r.to_string()));
        }
        if self.nccl {
            env.push(("CUDA_VISIBLE_DEVICES".into(), self.local_index[r].to_string()));
        }
        env
    }

    /// Rank `r`'s whole environment (the ring's hostfile apart).
    fn of(&self, r: usize) -> Vec<(String, String)> {
        self.common.iter().cloned().chain(self.own(r)).collect()
    }
}

/// The ranks' environment (beyond `o.env`): what `mlx.launch` sets for the backend.
fn rank_env(o: &LaunchOptions) -> Result<RankEnv> {
    let n = o.hosts.len();
    if n > MAX_RANKS {
        bail!("{n} ranks: famlx launch starts at most {MAX_RANKS}");
    }
    let all_local = o.hosts.iter().all(is_local);
    let grouped = n > 1;
    let mut common: Vec<(String, String)> = Vec::new();
    let mut ring = None;
    match o.backend.as_str() {
        "ring" | "nccl" if !grouped => {}
        "ring" => {
            if o.hosts.iter().any(|h| h.ips.is_empty()) {
                bail!("the ring backend needs IP addresses for every host (`ips` in the hostfile, or IPs in --hosts)");
            }
            let ports = match o.starting_port {
                Some(p) => consecutive_ports(p, n, "--starting-port")?,
                None if all_local => free_ports(n)?,
                None => consecutive_ports(DEFAULT_RING_PORT, n, "--starting-port")?,
            };
            let hostfile: Vec<Vec<String>> =
                o.hosts.iter().zip(&ports).map(|(h, p)| vec![format!("{}:{p}", h.ips[0])]).collect();
            common.push(("FAMLX_BACKEND".into(), o.backend.clone()));
            ring = Some(serde_json::to_string(&hostfile)?);
        }
        "nccl" => {
            let ip = o.hosts[0].ips.first().cloned().unwrap_or_else(|| o.hosts[0].ssh.clone());
            let port = match o.nccl_port {
                0 if all_local => free_ports(1)?[0],
                0 => bail!("--nccl-port 0 (a free port) works only when every rank is local; give a port"),
                p => p,
            };
            common.push(("FAMLX_BACKEND".into(), o.backend.clone()));
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
        if k.is_empty() {
            bail!("--env {e}: the variable's name is empty");
        }
        if e.contains('\0') {
            bail!("--env {}: contains a NUL byte", e.escape_debug());
        }
        common.push((k.to_string(), v.to_string()));
    }
    // One GPU per rank of a host, in rank order.
    let mut seen: std::collections::HashMap<&str, usize> = Default::default();
    let local_index = o
        .hosts
        .iter()
        .map(|h| {
            let k = seen.entry(h.ssh.as_str()).or_default();
            *k += 1;
            *k - 1
        })
        .collect();
    Ok(RankEnv { common, ring, local_index, grouped, nccl: grouped && o.backend == "nccl" })
}

/// The environment a launch of one rank on this machine runs with, or
/// `None` when the launch starts a group (or a rank on another host). A
/// group of one is a plain process: famlx runs it in the launcher's own
/// process, with `o.env` set, instead of starting a rank that would wait
/// for peers that never come.
pub fn single_local(o: &LaunchOptions) -> Result<Option<Vec<(String, String)>>> {
    let env = rank_env(o)?;
    Ok((o.hosts.len() == 1 && is_local(&o.hosts[0])).then(|| env.of(0)))
}

/// `mlx.launch`'s first ring port for remote hosts.
const DEFAULT_RING_PORT: u16 = 32323;

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// What every ssh the launcher runs is given before the host.
const SSH_OPTIONS: [&str; 4] = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=15"];

/// Set for a remote rank whose `MLX_HOSTFILE` is a temporary file written
/// for it: the rank removes the file once it has joined the group.
pub const HOSTFILE_IS_TEMPORARY: &str = "FAMLX_HOSTFILE_IS_TEMPORARY";

/// Set for a rank past 0 started through ssh: its stdin is a pipe from the
/// launcher, held open for as long as the launcher lives; the rank ends
/// when it closes.
pub const LAUNCHER_PIPE: &str = "FAMLX_LAUNCHER_PIPE";

/// Where the ring's hostfile is: for local ranks, the file the launcher
/// wrote; remote ranks get the JSON and write it where they run.
struct Ring<'a> {
    file: &'a Path,
    json: &'a str,
}

/// Starts one rank: locally, or through ssh with its environment exported
/// in the remote shell.
fn spawn(o: &LaunchOptions, host: &Host, env: &[(String, String)], ring: Option<&Ring>, rank: usize) -> Result<Child> {
    if is_local(host) {
        let mut c = Command::new(&o.famlx);
        c.args(&o.command);
        c.envs(env.iter().map(|(k, v)| (k, v)));
        if let Some(r) = ring {
            c.env("MLX_HOSTFILE", r.file);
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
    let script = remote_script(o, &env, ring.map(|r| r.json));
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
/// exported, the ring's hostfile `ring` written to a private temporary
/// file (which the rank removes once it has joined: see
/// [`HOSTFILE_IS_TEMPORARY`]), then famlx exec'd with the command; every
/// value single-quoted.
fn remote_script(o: &LaunchOptions, env: &[(String, String)], ring: Option<&str>) -> String {
    let mut script = String::new();
    if let Some(d) = &o.cwd {
        script += &format!("cd {} || exit 1; ", shell_quote(&d.display().to_string()));
    }
    for (k, v) in env {
        script += &format!("export {k}={}; ", shell_quote(v));
    }
    // After the environment: `mktemp` heeds a TMPDIR given with --env.
    if let Some(json) = ring {
        script += &format!(
            "f=$(mktemp) || exit 1; printf %s {} > \"$f\"; export MLX_HOSTFILE=\"$f\" {HOSTFILE_IS_TEMPORARY}=1; ",
            shell_quote(json)
        );
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

/// Starts every rank and waits for them. When one fails the others get
/// SIGTERM (SIGKILL 5 s later), and the error is one line naming the rank
/// and why (its own error line, or how it died); all ending well is
/// success.
pub fn launch(o: &LaunchOptions) -> Result<()> {
    if o.command.is_empty() {
        bail!("famlx launch: give the famlx command to run after `--` (e.g. `-- generate --prompt hi`)");
    }
    let envs = rank_env(o)?;
    // A private folder (mode 0700, a name no one can guess, never one that
    // was there before), removed when `scratch` drops: on every return.
    let scratch = tempfile::Builder::new()
        .prefix("famlx-launch-")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .tempdir()
        .map_err(|e| anyhow!("cannot make a temporary folder for the ranks: {e}"))?;
    let ring_file = scratch.path().join("ring.json");
    if let Some(json) = &envs.ring {
        std::fs::write(&ring_file, json).map_err(|e| anyhow!("{}: cannot write: {e}", ring_file.display()))?;
    }
    let ring = envs.ring.as_deref().map(|json| Ring { file: &ring_file, json });
    let n = o.hosts.len();
    let shared = Stderr::shared(n);
    let mut kids: Vec<Option<Child>> = Vec::new();
    let mut readers = Vec::new();
    for (r, h) in o.hosts.iter().enumerate() {
        match spawn(o, h, &envs.of(r), ring.as_ref(), r) {
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
    drop(scratch);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostfiles_in_both_shapes() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
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
        let many = |n: usize| format!("[{}]", vec![r#"{"ssh":"a","ips":["10.0.0.1"]}"#; n].join(","));
        std::fs::write(&list, many(MAX_RANKS)).unwrap();
        assert_eq!(read_hostfile(&list).unwrap().0.len(), MAX_RANKS);
        std::fs::write(&list, many(MAX_RANKS + 1)).unwrap();
        let e = read_hostfile(&list).unwrap_err().to_string();
        assert!(e.contains("list.json") && e.contains(&format!("{} hosts", MAX_RANKS + 1)), "{e}");
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
        let get = |r: usize, k: &str| envs.of(r).into_iter().find(|(n, _)| n == k).map(|(_, v)| v);
        // Remote hosts: mlx.launch's default ports, one per rank; the
        // hostfile is held once, not in each rank's variables.
        assert_eq!(envs.ring.as_deref(), Some(r#"[["10.0.0.1:32323"],["10.0.0.2:32324"]]"#));
        assert!(envs.of(1).iter().all(|(_, v)| !v.contains("10.0.0.2")), "{:?}", envs.of(1));
        assert_eq!(get(1, "MLX_RANK").as_deref(), Some("1"));
        assert_eq!(get(0, "FAMLX_BACKEND").as_deref(), Some("ring"));
        let script = remote_script(&o, &envs.of(1), envs.ring.as_deref());
        assert!(script.starts_with("cd '/w d' || exit 1; "), "{script}");
        assert!(script.contains("export MLX_RANK='1'; "), "{script}");
        assert!(script.contains(r"export X='it'\''s'; "), "{script}");
        assert!(script.contains(r#"printf %s '[["10.0.0.1:32323"],["10.0.0.2:32324"]]' > "$f";"#), "{script}");
        assert!(script.contains(&format!(r#"export MLX_HOSTFILE="$f" {HOSTFILE_IS_TEMPORARY}=1; "#)), "{script}");
        assert!(script.ends_with("exec '/opt/famlx' 'generate' '--prompt' 'hi there'"), "{script}");
        // NCCL: the first host's address, world size, one GPU per rank of a host.
        let nccl = LaunchOptions { backend: "nccl".into(), ..o.clone() };
        let envs = rank_env(&nccl).unwrap();
        let get = |r: usize, k: &str| envs.of(r).into_iter().find(|(n, _)| n == k).map(|(_, v)| v);
        assert_eq!(get(1, "NCCL_HOST_IP").as_deref(), Some("10.0.0.1"));
        assert_eq!(get(1, "MLX_WORLD_SIZE").as_deref(), Some("2"));
        assert_eq!(get(1, "CUDA_VISIBLE_DEVICES").as_deref(), Some("0"));
        assert!(rank_env(&LaunchOptions { backend: "mpi".into(), ..nccl.clone() }).is_err());
        let e = rank_env(&LaunchOptions { nccl_port: 0, ..nccl }).unwrap_err().to_string();
        assert!(e.contains("--nccl-port 0"), "{e}");

        // Ports stay within 1-65535, whatever the start and the rank count.
        let ports = |p: Option<u16>, n: usize| {
            let hosts = vec![Host { ssh: "a".into(), ips: vec!["10.0.0.1".into()] }; n];
            rank_env(&LaunchOptions { hosts, starting_port: p, ..o.clone() }).map(|e| e.ring.unwrap())
        };
        assert!(ports(Some(65534), 2).unwrap().ends_with(r#"["10.0.0.1:65535"]]"#));
        let e = ports(Some(65535), 2).unwrap_err().to_string();
        assert!(e.contains("--starting-port 65535") && e.contains("65535-65536"), "{e}");
        let e = ports(Some(0), 2).unwrap_err().to_string();
        assert!(e.contains("--starting-port 0"), "{e}");
        // mlx.launch's default start, 32323, with more ranks than fit after it.
        assert!(ports(None, 1024).is_ok());
        let e = ports(Some(65000), 1000).unwrap_err().to_string();
        assert!(e.contains("past 65535"), "{e}");
        let e = ports(None, MAX_RANKS + 1).unwrap_err().to_string();
        assert!(e.contains(&format!("at most {MAX_RANKS}")), "{e}");
    }

    #[test]
    fn one_rank_is_a_plain_process_and_the_rank_count_is_bounded() {
        let o = LaunchOptions {
            hosts: host_list("10.0.0.1", 1).unwrap(),
            backend: "ring".into(),
            env: vec!["A=b=c".into()],
            starting_port: None,
            nccl_port: 12345,
            cwd: None,
            famlx: "/opt/famlx".into(),
            command: vec!["plugins".into()],
        };
        let envs = rank_env(&o).unwrap();
        assert_eq!(envs.of(0), vec![("A".to_string(), "b=c".to_string())]);
        assert!(envs.ring.is_none());
        let e = rank_env(&LaunchOptions { env: vec!["=x".into()], ..o }).unwrap_err().to_string();
        assert!(e.contains("--env =x"), "{e}");

        // -n times the hosts: refused past the bound before any host is made.
        assert_eq!(host_list("a,b", MAX_RANKS / 2).unwrap().len(), MAX_RANKS);
        for (hosts, n) in [("a,b", MAX_RANKS / 2 + 1), ("127.0.0.1", 70000), ("a,b,c", usize::MAX)] {
            let e = host_list(hosts, n).unwrap_err().to_string();
            assert!(e.contains(&format!("-n {n}")) && e.contains(&format!("at most {MAX_RANKS} ranks")), "{e}");
        }
        assert!(host_list("a", 0).unwrap_err().to_string().contains("-n"));
    }
}
