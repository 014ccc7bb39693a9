//! Devices, streams and the live backend.

use crate::{check, Result};
use mlx_sys as sys;

/// A device kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceType {
    /// The CPU.
    Cpu = 0,
    /// The GPU (Metal or CUDA).
    Gpu = 1,
}

/// The GPU backend compiled into the loaded `libmlx`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// No GPU backend: CPU only.
    Cpu,
    /// Apple Metal.
    Metal,
    /// NVIDIA CUDA.
    Cuda,
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Backend::Cpu => "cpu",
            Backend::Metal => "metal",
            Backend::Cuda => "cuda",
        })
    }
}

/// The backend of the loaded library.
pub fn backend() -> Backend {
    match unsafe { sys::mlxs_backend() } {
        1 => Backend::Metal,
        2 => Backend::Cuda,
        _ => Backend::Cpu,
    }
}

/// The default device.
pub fn default_device() -> Result<(DeviceType, i32)> {
    let (mut t, mut i) = (0, 0);
    check(unsafe { sys::mlxs_default_device(&mut t, &mut i) })?;
    Ok((if t == 1 { DeviceType::Gpu } else { DeviceType::Cpu }, i))
}

/// Sets the default device.
pub fn set_default_device(t: DeviceType, index: i32) -> Result<()> {
    check(unsafe { sys::mlxs_set_default_device(t as i32, index) })
}

/// Whether a device kind is usable.
pub fn is_available(t: DeviceType) -> bool {
    unsafe { sys::mlxs_device_available(t as i32) == 1 }
}

/// A new stream on a device; returns its index.
pub fn new_stream(t: DeviceType) -> Result<i32> {
    let mut i = 0;
    check(unsafe { sys::mlxs_new_stream(t as i32, &mut i) })?;
    Ok(i)
}

/// Makes a stream the default for its device.
pub fn set_default_stream(t: DeviceType, index: i32) -> Result<()> {
    check(unsafe { sys::mlxs_set_default_stream(t as i32, index) })
}

/// The calling thread's default stream on a device (MLX keeps one per
/// thread); returns its index.
pub fn default_stream(t: DeviceType) -> Result<i32> {
    let mut i = 0;
    check(unsafe { sys::mlxs_default_stream(t as i32, &mut i) })?;
    Ok(i)
}

/// Waits for all work queued on one stream.
pub fn synchronize_stream(t: DeviceType, index: i32) -> Result<()> {
    check(unsafe { sys::mlxs_synchronize_stream(t as i32, index) })
}
