//! MLX's allocator: usage, peak, buffer cache and limits.

use mlx_sys as sys;

/// Bytes currently held by live arrays.
pub fn active() -> usize {
    unsafe { sys::mlxs_get_active_memory() }
}
/// Peak of [`active`] since start or the last [`reset_peak`].
pub fn peak() -> usize {
    unsafe { sys::mlxs_get_peak_memory() }
}
/// Resets the peak counter.
pub fn reset_peak() {
    unsafe { sys::mlxs_reset_peak_memory() }
}
/// Bytes held in the buffer cache.
pub fn cache() -> usize {
    unsafe { sys::mlxs_get_cache_memory() }
}
/// Sets the memory limit; returns the previous one.
pub fn set_memory_limit(bytes: usize) -> usize {
    unsafe { sys::mlxs_set_memory_limit(bytes) }
}
/// The memory limit.
pub fn memory_limit() -> usize {
    unsafe { sys::mlxs_get_memory_limit() }
}
/// Sets the buffer-cache limit; returns the previous one.
pub fn set_cache_limit(bytes: usize) -> usize {
    unsafe { sys::mlxs_set_cache_limit(bytes) }
}
/// Sets the wired limit (Metal); returns the previous one, 0 elsewhere.
pub fn set_wired_limit(bytes: usize) -> usize {
    unsafe { sys::mlxs_set_wired_limit(bytes) }
}
/// Frees the buffer cache.
pub fn clear_cache() {
    unsafe { sys::mlxs_clear_cache() }
}
