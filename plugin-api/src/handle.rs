//! Arrays across the plugin boundary.

use abi_stable::StableAbi;
use mlx::Array;

/// An owned MLX array crossing the plugin boundary: a pointer to a heap
/// `mlx::core::array` in the one `libmlx` of the process. Dropping it frees
/// that reference.
#[repr(transparent)]
#[derive(StableAbi)]
pub struct ArrayHandle(*mut u8);

// SAFETY: same guarantees as mlx::Array (a reference-counted MLX handle).
unsafe impl Send for ArrayHandle {}

impl ArrayHandle {
    /// Takes the array back.
    pub fn into_array(self) -> Array {
        let raw = self.0 as mlx_sys::mlxs_array;
        std::mem::forget(self);
        // SAFETY: the handle owned this reference.
        unsafe { Array::from_raw(raw) }
    }

    /// A new reference to the same array, leaving this handle intact.
    pub fn to_array(&self) -> Array {
        // SAFETY: the pointer is live while self is; wrapping without owning
        // and cloning gives us our own reference.
        let borrowed = std::mem::ManuallyDrop::new(unsafe { Array::from_raw(self.0 as mlx_sys::mlxs_array) });
        (*borrowed).clone()
    }
}

impl From<Array> for ArrayHandle {
    fn from(a: Array) -> Self {
        ArrayHandle(a.into_raw() as *mut u8)
    }
}

impl Drop for ArrayHandle {
    fn drop(&mut self) {
        // SAFETY: we own this reference.
        drop(unsafe { Array::from_raw(self.0 as mlx_sys::mlxs_array) })
    }
}

impl Clone for ArrayHandle {
    fn clone(&self) -> Self {
        self.to_array().into()
    }
}

impl std::fmt::Debug for ArrayHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ArrayHandle({:?})", self.to_array())
    }
}
