//! MLX's distributed layer: one group of processes (ranks) that sum, gather,
//! send and receive arrays over MLX's own backends (ring over TCP, MPI,
//! NCCL on CUDA GPUs).
//!
//! There is one group per process: the one [`init`] made. The collective
//! ops below always run over it, so code that never called [`init`] (or ran
//! as a single process) sees a group of one, where they are identities.

use crate::{check, out1, Array, Dtype, Result};
use mlx_sys as sys;
use std::ffi::CString;

/// This process's place in the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Group {
    /// This process's rank, `0..size`.
    pub rank: i32,
    /// How many processes the group holds.
    pub size: i32,
}

impl Group {
    /// The group of one process alone.
    pub const SINGLE: Group = Group { rank: 0, size: 1 };
}

fn cstr(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| crate::Error::msg("backend name holds a NUL byte"))
}

/// Whether MLX was built with `backend` (`ring`, `mpi`, `nccl`, `jaccl`;
/// `any` for at least one).
pub fn is_available(backend: &str) -> Result<bool> {
    let b = cstr(backend)?;
    let mut out = 0;
    check(unsafe { sys::mlxs_dist_is_available(b.as_ptr(), &mut out) })?;
    Ok(out != 0)
}

/// Joins (or, on later calls, returns) the process group of `backend`
/// (`any`, `ring`, `mpi`, `nccl`), configured as `mlx.launch` configures it
/// (`MLX_RANK` and `MLX_HOSTFILE` for ring; `NCCL_HOST_IP`, `NCCL_PORT`,
/// `MLX_WORLD_SIZE` for NCCL). With `strict`, a backend that cannot start
/// is an error; without, the result is a group of one.
pub fn init(backend: &str, strict: bool) -> Result<Group> {
    let b = cstr(backend)?;
    let (mut rank, mut size) = (0, 0);
    check(unsafe { sys::mlxs_dist_init(b.as_ptr(), strict as i32, &mut rank, &mut size) })?;
    Ok(Group { rank, size })
}

/// The group as it stands: what [`init`] made, or a group of one when no
/// backend was started.
pub fn group() -> Result<Group> {
    init("any", false)
}

/// The element-wise sum of `x` over every rank (each rank gets the sum).
pub fn all_sum(x: &Array) -> Result<Array> {
    out1(|o| unsafe { sys::mlxs_dist_all_sum(x.as_raw(), o) })
}

/// The element-wise maximum of `x` over every rank.
pub fn all_max(x: &Array) -> Result<Array> {
    out1(|o| unsafe { sys::mlxs_dist_all_max(x.as_raw(), o) })
}

/// Every rank's `x` stacked along axis 0 in rank order.
pub fn all_gather(x: &Array) -> Result<Array> {
    out1(|o| unsafe { sys::mlxs_dist_all_gather(x.as_raw(), o) })
}

/// Sends `x` to rank `dst`; the result must be evaluated for the send to
/// happen (it is `x`'s placeholder in the graph).
pub fn send(x: &Array, dst: i32) -> Result<Array> {
    out1(|o| unsafe { sys::mlxs_dist_send(x.as_raw(), dst, o) })
}

/// Receives an array of `shape` and `dtype` from rank `src`.
pub fn recv(shape: &[i32], dtype: Dtype, src: i32) -> Result<Array> {
    out1(|o| unsafe { sys::mlxs_dist_recv(shape.as_ptr(), shape.len(), dtype as i32, src, o) })
}
