//! `famlx launch`: run a famlx command as the ranks of one distributed
//! group (see [`crate::distributed::launch`]).

use crate::distributed::launch::{host_list, launch, read_hostfile, single_local, LaunchOptions, MAX_RANKS};
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

/// `famlx launch` flags, named as `mlx.launch` names them.
#[derive(Args, Debug)]
pub struct LaunchArgs {
    /// Ranks per host (with the default host, 127.0.0.1: ranks on this
    /// machine); at most 1024 ranks in all. One rank on this machine runs
    /// the command in this process.
    #[arg(short = 'n', long = "repeat-hosts", default_value_t = 1,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=MAX_RANKS as u64))]
    pub n: usize,
    /// Comma-separated hosts (IPs are also the ring's addresses).
    #[arg(long, default_value = "127.0.0.1")]
    pub hosts: String,
    /// An `mlx.launch` hostfile (JSON: `[{"ssh": …, "ips": [...]}, …]` or
    /// `{"backend": …, "envs": [...], "hosts": [...]}`); one rank per host.
    #[arg(long)]
    pub hostfile: Option<PathBuf>,
    /// `ring` (TCP) or `nccl` (CUDA GPUs). Default: the hostfile's, else
    /// nccl where MLX has a GPU, else ring.
    #[arg(long)]
    pub backend: Option<String>,
    /// `KEY=VALUE` for every rank (repeatable).
    #[arg(long)]
    pub env: Vec<String>,
    /// First port of the ring (one per rank; default: free ports when every
    /// rank is local, else 32323).
    #[arg(long = "starting-port", short = 'p')]
    pub starting_port: Option<u16>,
    /// NCCL's rendezvous port on the first host (0: a free one, local runs only).
    #[arg(long = "nccl-port", default_value_t = 12345)]
    pub nccl_port: u16,
    /// Working directory of remote ranks.
    #[arg(long)]
    pub cwd: Option<PathBuf>,
    /// The famlx command each rank runs, after `--` (e.g. `-- generate --prompt hi`).
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// Runs `famlx launch`; `run_here` runs a famlx command line (without the
/// program name) in this process, for a launch of one rank on this machine.
pub fn run(a: LaunchArgs, run_here: impl FnOnce(Vec<String>) -> Result<()>) -> Result<()> {
    let (hosts, file_backend, mut env) = match &a.hostfile {
        Some(f) => read_hostfile(f)?,
        None => (host_list(&a.hosts, a.n)?, None, Vec::new()),
    };
    env.extend(a.env);
    let backend = match a.backend.or(file_backend) {
        Some(b) => b,
        None if mlx::device::backend() == mlx::device::Backend::Cuda => "nccl".into(),
        None => "ring".into(),
    };
    let o = LaunchOptions {
        hosts,
        backend,
        env,
        starting_port: a.starting_port,
        nccl_port: a.nccl_port,
        cwd: a.cwd,
        famlx: std::env::current_exe()?,
        command: a.command,
    };
    if let Some(env) = single_local(&o)? {
        for (k, v) in env {
            // Before the command starts: none of its threads reads the environment yet.
            std::env::set_var(k, v);
        }
        return run_here(o.command);
    }
    launch(&o)
}
