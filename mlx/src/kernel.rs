//! Custom GPU kernels behind one call: Metal source on Apple, CUDA source on
//! NVIDIA, chosen by the backend MLX reports at run time.

use crate::device::{backend, Backend};
use crate::{check, Array, Dtype, Error, Result};
use mlx_sys as sys;
use std::ffi::CString;

/// A template argument of a kernel.
#[derive(Debug, Clone, Copy)]
pub enum TemplateArg {
    /// An integer.
    Int(i32),
    /// A boolean.
    Bool(bool),
    /// A type.
    Dtype(Dtype),
}

/// Kernel sources per backend; a backend without a source has no kernel.
#[derive(Debug, Clone, Default)]
pub struct KernelSource {
    /// Metal body (as for `mx.fast.metal_kernel`).
    pub metal: Option<String>,
    /// CUDA body (as for `mx.fast.cuda_kernel`).
    pub cuda: Option<String>,
    /// Shared header code.
    pub header: String,
}

/// A custom kernel compiled for the live backend.
pub struct Kernel {
    raw: sys::mlxs_kernel,
    nout: usize,
}

impl Drop for Kernel {
    fn drop(&mut self) {
        unsafe { sys::mlxs_kernel_free(self.raw) }
    }
}

/// One launch of a [`Kernel`].
pub struct Launch<'a> {
    /// Inputs, in the order of the kernel's input names.
    pub inputs: &'a [&'a Array],
    /// Output shapes and dtypes.
    pub outputs: &'a [(&'a [i32], Dtype)],
    /// Grid (total threads per axis, MLX convention).
    pub grid: [i32; 3],
    /// Threads per block.
    pub block: [i32; 3],
    /// Template arguments.
    pub template: &'a [(&'a str, TemplateArg)],
    /// Fill outputs with this value before the launch.
    pub init_value: Option<f32>,
}

impl Kernel {
    /// Whether a kernel from `src` can run on the live backend.
    pub fn available(src: &KernelSource) -> bool {
        match backend() {
            Backend::Metal => src.metal.is_some(),
            Backend::Cuda => src.cuda.is_some(),
            Backend::Cpu => false,
        }
    }

    /// Builds the kernel for the live backend (an error on CPU-only MLX or
    /// when `src` has no source for it).
    pub fn new(
        name: &str,
        inputs: &[&str],
        outputs: &[&str],
        src: &KernelSource,
        shared_memory: i32,
    ) -> Result<Kernel> {
        let (code, body) = match backend() {
            Backend::Metal => (1, src.metal.as_deref()),
            Backend::Cuda => (2, src.cuda.as_deref()),
            Backend::Cpu => (0, None),
        };
        let body = body.ok_or_else(|| match backend() {
            Backend::Cpu => Error::msg(format!(
                "kernel {name}: custom kernels need a GPU backend (Metal or CUDA), but the loaded libmlx is CPU-only"
            )),
            b => Error::msg(format!("kernel {name}: no source for the {b} backend")),
        })?;
        let c = |s: &str| CString::new(s).map_err(|_| Error::msg("kernel: NUL in a string"));
        let ins: Vec<CString> = inputs.iter().map(|s| c(s)).collect::<Result<_>>()?;
        let outs: Vec<CString> = outputs.iter().map(|s| c(s)).collect::<Result<_>>()?;
        let inp: Vec<_> = ins.iter().map(|s| s.as_ptr()).collect();
        let outp: Vec<_> = outs.iter().map(|s| s.as_ptr()).collect();
        let (n, b, h) = (c(name)?, c(body)?, c(&src.header)?);
        let mut raw = std::ptr::null_mut();
        check(unsafe {
            sys::mlxs_kernel_new(
                code,
                n.as_ptr(),
                inp.as_ptr(),
                inp.len(),
                outp.as_ptr(),
                outp.len(),
                b.as_ptr(),
                h.as_ptr(),
                1,
                shared_memory,
                &mut raw,
            )
        })?;
        Ok(Kernel { raw, nout: outputs.len() })
    }

    /// Launches the kernel; returns its outputs.
    pub fn call(&self, l: &Launch<'_>) -> Result<Vec<Array>> {
        if l.outputs.len() != self.nout {
            return Err(Error::msg(format!("kernel: {} outputs declared, {} given", self.nout, l.outputs.len())));
        }
        let ins: Vec<_> = l.inputs.iter().map(|a| a.as_raw()).collect();
        let mut shapes = Vec::new();
        let mut ndims = Vec::new();
        let mut dts = Vec::new();
        for (s, d) in l.outputs {
            shapes.extend_from_slice(s);
            ndims.push(s.len());
            dts.push(*d as i32);
        }
        let tn: Vec<CString> = l
            .template
            .iter()
            .map(|(n, _)| CString::new(*n).map_err(|_| Error::msg("bad name")))
            .collect::<Result<_>>()?;
        let tnp: Vec<_> = tn.iter().map(|s| s.as_ptr()).collect();
        let (mut tk, mut tv) = (Vec::new(), Vec::new());
        for (_, a) in l.template {
            let (k, v) = match a {
                TemplateArg::Int(i) => (0, *i),
                TemplateArg::Bool(b) => (1, *b as i32),
                TemplateArg::Dtype(d) => (2, *d as i32),
            };
            tk.push(k);
            tv.push(v);
        }
        let mut outs = vec![std::ptr::null_mut(); self.nout];
        check(unsafe {
            sys::mlxs_kernel_call(
                self.raw,
                ins.as_ptr(),
                ins.len(),
                shapes.as_ptr(),
                ndims.as_ptr(),
                dts.as_ptr(),
                dts.len(),
                l.grid.as_ptr(),
                l.block.as_ptr(),
                tnp.as_ptr(),
                tk.as_ptr(),
                tv.as_ptr(),
                tk.len(),
                l.init_value.unwrap_or(0.0),
                l.init_value.is_some() as i32,
                outs.as_mut_ptr(),
            )
        })?;
        Ok(outs.into_iter().map(|r| unsafe { Array::from_raw(r) }).collect())
    }
}
