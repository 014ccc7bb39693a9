//! `mlx::core::compile` over Rust closures: trace once, then replay a fused
//! graph for inputs of the same shapes (or any shapes when `shapeless`).

use crate::{check, Array, Result};
use mlx_sys as sys;
use std::ffi::{c_int, c_void, CString};

type Body = dyn Fn(&[Array]) -> Result<Vec<Array>>;

/// A compiled function of arrays.
pub struct Compiled {
    raw: sys::mlxs_closure,
}

impl Drop for Compiled {
    fn drop(&mut self) {
        unsafe { sys::mlxs_closure_free(self.raw) }
    }
}

unsafe extern "C" fn trampoline(
    ctx: *mut c_void,
    inputs: *const sys::mlxs_array,
    n: usize,
    outs: *mut sys::mlxs_array,
    cap: usize,
    nout: *mut usize,
) -> c_int {
    let f = &*(ctx as *const Box<Body>);
    // Borrowed handles: wrap them without taking ownership.
    let ins: Vec<Array> = (0..n)
        .map(|i| {
            let mut c = std::ptr::null_mut();
            sys::mlxs_array_clone(*inputs.add(i), &mut c);
            Array::from_raw(c)
        })
        .collect();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&ins)));
    let msg = match r {
        Ok(Ok(v)) if v.len() <= cap => {
            *nout = v.len();
            for (i, a) in v.into_iter().enumerate() {
                *outs.add(i) = a.into_raw();
            }
            return 0;
        }
        Ok(Ok(v)) => format!("compiled function returned {} outputs (max {cap})", v.len()),
        Ok(Err(e)) => e.msg,
        Err(_) => "panic inside a compiled function".to_string(),
    };
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    sys::mlxs_set_error(c.as_ptr());
    1
}

unsafe extern "C" fn drop_body(ctx: *mut c_void) {
    drop(Box::from_raw(ctx as *mut Box<Body>));
}

impl Compiled {
    /// Compiles `f`. With `shapeless`, one trace serves all input shapes
    /// (only valid when the graph does not depend on shapes).
    pub fn new(f: impl Fn(&[Array]) -> Result<Vec<Array>> + 'static, shapeless: bool) -> Result<Compiled> {
        let body: Box<Box<Body>> = Box::new(Box::new(f));
        let ctx = Box::into_raw(body) as *mut c_void;
        let mut raw = std::ptr::null_mut();
        check(unsafe { sys::mlxs_compile(trampoline, ctx, Some(drop_body), shapeless as i32, &mut raw) })?;
        Ok(Compiled { raw })
    }

    /// Calls the compiled function.
    pub fn call(&self, inputs: &[&Array]) -> Result<Vec<Array>> {
        let raws: Vec<_> = inputs.iter().map(|a| a.as_raw()).collect();
        let mut outs = vec![std::ptr::null_mut(); 64];
        let mut n = 0;
        check(unsafe {
            sys::mlxs_closure_call(self.raw, raws.as_ptr(), raws.len(), outs.as_mut_ptr(), outs.len(), &mut n)
        })?;
        Ok(outs.into_iter().take(n).map(|r| unsafe { Array::from_raw(r) }).collect())
    }
}

/// Turns compilation on or off globally (off: compiled functions run eagerly).
pub fn set_enabled(on: bool) -> Result<()> {
    check(unsafe { sys::mlxs_set_compile_enabled(on as i32) })
}
