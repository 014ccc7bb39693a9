//! Raw FFI to famlx's C++ shim over MLX (`csrc/shim.h`).
//!
//! Every `c_int`-returning function returns 0 on success and 1 when MLX threw;
//! the message is then in [`mlxs_last_error`]. The safe API lives in the
//! `famlx-mlx` crate; nothing here should be used directly by families.
#![allow(non_camel_case_types)]
#![allow(clippy::missing_safety_doc)]

use std::ffi::{c_char, c_int, c_void};

/// Opaque `mlx::core::array` on the heap.
#[repr(C)]
pub struct mlxs_array_s {
    _p: [u8; 0],
}
/// Handle to an `mlx::core::array` (owned by whoever holds it).
pub type mlxs_array = *mut mlxs_array_s;
/// Opaque custom kernel.
#[repr(C)]
pub struct mlxs_kernel_s {
    _p: [u8; 0],
}
/// Handle to a compiled custom kernel.
pub type mlxs_kernel = *mut mlxs_kernel_s;
/// Opaque compiled closure.
#[repr(C)]
pub struct mlxs_closure_s {
    _p: [u8; 0],
}
/// Handle to a function compiled with `mlx::core::compile`.
pub type mlxs_closure = *mut mlxs_closure_s;
/// Opaque loaded tensor collection.
#[repr(C)]
pub struct mlxs_tensors_s {
    _p: [u8; 0],
}
/// Handle to tensors (and metadata) loaded from safetensors or GGUF.
pub type mlxs_tensors = *mut mlxs_tensors_s;

/// Callback the shim calls to trace a compiled function.
pub type mlxs_closure_fn = unsafe extern "C" fn(
    ctx: *mut c_void,
    inputs: *const mlxs_array,
    n: usize,
    outs: *mut mlxs_array,
    cap: usize,
    nout: *mut usize,
) -> c_int;

/// The MLX version this crate's shim was compiled against.
pub const MLX_BUILD_VERSION: &str = "0.32.4";
/// Folder holding the `libmlx` this crate linked at build time.
pub const MLX_LIBDIR: &str = env!("FAMLX_MLX_LIBDIR");

extern "C" {
    pub fn mlxs_last_error() -> *const c_char;
    pub fn mlxs_runtime_version() -> *const c_char;
    pub fn mlxs_build_version() -> *const c_char;
    pub fn mlxs_array_free(a: mlxs_array);
    pub fn mlxs_array_clone(a: mlxs_array, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_array_from_data(
        data: *const c_void,
        shape: *const c_int,
        ndim: usize,
        dtype: c_int,
        out: *mut mlxs_array,
    ) -> c_int;
    pub fn mlxs_array_from_f64(v: f64, dtype: c_int, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_array_from_i64(v: i64, dtype: c_int, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_array_ndim(a: mlxs_array) -> usize;
    pub fn mlxs_array_shape(a: mlxs_array) -> *const c_int;
    pub fn mlxs_array_dtype(a: mlxs_array) -> c_int;
    pub fn mlxs_array_size(a: mlxs_array) -> usize;
    pub fn mlxs_array_nbytes(a: mlxs_array) -> usize;
    pub fn mlxs_array_to_host(a: mlxs_array, dtype: c_int, dst: *mut c_void, nbytes: usize) -> c_int;
    pub fn mlxs_array_item_f64(a: mlxs_array, out: *mut f64) -> c_int;
    pub fn mlxs_array_item_i64(a: mlxs_array, out: *mut i64) -> c_int;
    pub fn mlxs_array_id(a: mlxs_array, out: *mut usize) -> c_int;
    pub fn mlxs_eval(arrs: *const mlxs_array, n: usize) -> c_int;
    pub fn mlxs_async_eval(arrs: *const mlxs_array, n: usize) -> c_int;
    pub fn mlxs_graph_census(arrs: *const mlxs_array, n: usize, out: *mut *mut c_char) -> c_int;
    pub fn mlxs_string_free(s: *mut c_char);
    pub fn mlxs_synchronize() -> c_int;
    pub fn mlxs_unary(op: c_int, a: mlxs_array, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_binary(op: c_int, a: mlxs_array, b: mlxs_array, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_reduce(
        op: c_int,
        a: mlxs_array,
        axes: *const c_int,
        naxes: usize,
        all_axes: c_int,
        keepdims: c_int,
        out: *mut mlxs_array,
    ) -> c_int;
    pub fn mlxs_arg_reduce(op: c_int, a: mlxs_array, axis: c_int, keepdims: c_int, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_scan(
        op: c_int,
        a: mlxs_array,
        axis: c_int,
        reverse: c_int,
        inclusive: c_int,
        out: *mut mlxs_array,
    ) -> c_int;
    pub fn mlxs_var(
        a: mlxs_array,
        axes: *const c_int,
        naxes: usize,
        all_axes: c_int,
        keepdims: c_int,
        ddof: c_int,
        std: c_int,
        out: *mut mlxs_array,
    ) -> c_int;
    pub fn mlxs_softmax(a: mlxs_array, axes: *const c_int, naxes: usize, precise: c_int, out: *mut mlxs_array)
        -> c_int;
    pub fn mlxs_zeros(shape: *const c_int, ndim: usize, dtype: c_int, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_ones(shape: *const c_int, ndim: usize, dtype: c_int, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_full(shape: *const c_int, ndim: usize, vals: mlxs_array, dtype: c_int, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_arange(start: f64, stop: f64, step: f64, dtype: c_int, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_linspace(start: f64, stop: f64, num: c_int, dtype: c_int, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_eye(n: c_int, m: c_int, k: c_int, dtype: c_int, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_tri(n: c_int, m: c_int, k: c_int, dtype: c_int, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_tril(a: mlxs_array, k: c_int, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_triu(a: mlxs_array, k: c_int, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_astype(a: mlxs_array, dtype: c_int, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_view(a: mlxs_array, dtype: c_int, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_reshape(a: mlxs_array, shape: *const c_int, ndim: usize, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_transpose(a: mlxs_array, axes: *const c_int, naxes: usize, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_squeeze(a: mlxs_array, axes: *const c_int, naxes: usize, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_expand_dims(a: mlxs_array, axes: *const c_int, naxes: usize, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_broadcast_to(a: mlxs_array, shape: *const c_int, ndim: usize, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_flatten(a: mlxs_array, start: c_int, end: c_int, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_contiguous(a: mlxs_array, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_slice(
        a: mlxs_array,
        start: *const c_int,
        stop: *const c_int,
        strides: *const c_int,
        n: usize,
        out: *mut mlxs_array,
    ) -> c_int;
    pub fn mlxs_slice_dynamic(
        a: mlxs_array,
        start: mlxs_array,
        axes: *const c_int,
        naxes: usize,
        sizes: *const c_int,
        nsizes: usize,
        out: *mut mlxs_array,
    ) -> c_int;
    pub fn mlxs_slice_update(
        src: mlxs_array,
        upd: mlxs_array,
        start: *const c_int,
        stop: *const c_int,
        strides: *const c_int,
        n: usize,
        out: *mut mlxs_array,
    ) -> c_int;
    pub fn mlxs_slice_update_dynamic(
        src: mlxs_array,
        upd: mlxs_array,
        start: mlxs_array,
        axes: *const c_int,
        naxes: usize,
        out: *mut mlxs_array,
    ) -> c_int;
    pub fn mlxs_take(a: mlxs_array, idx: mlxs_array, axis: c_int, has_axis: c_int, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_take_along_axis(a: mlxs_array, idx: mlxs_array, axis: c_int, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_put_along_axis(
        a: mlxs_array,
        idx: mlxs_array,
        vals: mlxs_array,
        axis: c_int,
        out: *mut mlxs_array,
    ) -> c_int;
    pub fn mlxs_scatter(
        op: c_int,
        a: mlxs_array,
        idx: *const mlxs_array,
        nidx: usize,
        upd: mlxs_array,
        axes: *const c_int,
        naxes: usize,
        out: *mut mlxs_array,
    ) -> c_int;
    pub fn mlxs_where(c: mlxs_array, x: mlxs_array, y: mlxs_array, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_pad(
        a: mlxs_array,
        axes: *const c_int,
        low: *const c_int,
        high: *const c_int,
        n: usize,
        val: mlxs_array,
        mode: *const c_char,
        out: *mut mlxs_array,
    ) -> c_int;
    pub fn mlxs_concatenate(arrs: *const mlxs_array, n: usize, axis: c_int, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_stack(arrs: *const mlxs_array, n: usize, axis: c_int, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_split_sections(
        a: mlxs_array,
        num: c_int,
        axis: c_int,
        outs: *mut mlxs_array,
        cap: usize,
        nout: *mut usize,
    ) -> c_int;
    pub fn mlxs_split_indices(
        a: mlxs_array,
        idx: *const c_int,
        nidx: usize,
        axis: c_int,
        outs: *mut mlxs_array,
        cap: usize,
        nout: *mut usize,
    ) -> c_int;
    pub fn mlxs_repeat(a: mlxs_array, repeats: c_int, axis: c_int, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_tile(a: mlxs_array, reps: *const c_int, n: usize, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_flip(a: mlxs_array, axis: c_int, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_roll(a: mlxs_array, shift: c_int, axis: c_int, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_sort(a: mlxs_array, axis: c_int, arg: c_int, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_partition(a: mlxs_array, kth: c_int, axis: c_int, arg: c_int, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_topk(a: mlxs_array, k: c_int, axis: c_int, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_clip(a: mlxs_array, lo: mlxs_array, hi: mlxs_array, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_as_strided(
        a: mlxs_array,
        shape: *const c_int,
        ndim: usize,
        strides: *const i64,
        offset: usize,
        out: *mut mlxs_array,
    ) -> c_int;
    pub fn mlxs_matmul(a: mlxs_array, b: mlxs_array, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_cpu_swiglu(gate: mlxs_array, up: mlxs_array, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_addmm(
        c: mlxs_array,
        a: mlxs_array,
        b: mlxs_array,
        alpha: f32,
        beta: f32,
        out: *mut mlxs_array,
    ) -> c_int;
    pub fn mlxs_conv(
        x: mlxs_array,
        w: mlxs_array,
        stride: *const c_int,
        padding: *const c_int,
        dilation: *const c_int,
        nspatial: usize,
        groups: c_int,
        out: *mut mlxs_array,
    ) -> c_int;
    pub fn mlxs_conv_transpose(
        x: mlxs_array,
        w: mlxs_array,
        stride: *const c_int,
        padding: *const c_int,
        dilation: *const c_int,
        output_padding: *const c_int,
        nspatial: usize,
        groups: c_int,
        out: *mut mlxs_array,
    ) -> c_int;
    pub fn mlxs_fft(op: c_int, a: mlxs_array, n: c_int, axis: c_int, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_quantize(
        w: mlxs_array,
        group_size: c_int,
        bits: c_int,
        mode: *const c_char,
        wq: *mut mlxs_array,
        scales: *mut mlxs_array,
        biases: *mut mlxs_array,
    ) -> c_int;
    pub fn mlxs_dequantize(
        w: mlxs_array,
        scales: mlxs_array,
        biases: mlxs_array,
        group_size: c_int,
        bits: c_int,
        mode: *const c_char,
        dtype: c_int,
        out: *mut mlxs_array,
    ) -> c_int;
    pub fn mlxs_quantized_matmul(
        x: mlxs_array,
        w: mlxs_array,
        scales: mlxs_array,
        biases: mlxs_array,
        transpose: c_int,
        group_size: c_int,
        bits: c_int,
        mode: *const c_char,
        out: *mut mlxs_array,
    ) -> c_int;
    pub fn mlxs_gather_mm(
        a: mlxs_array,
        b: mlxs_array,
        lhs: mlxs_array,
        rhs: mlxs_array,
        sorted: c_int,
        out: *mut mlxs_array,
    ) -> c_int;
    pub fn mlxs_gather_qmm(
        x: mlxs_array,
        w: mlxs_array,
        scales: mlxs_array,
        biases: mlxs_array,
        lhs: mlxs_array,
        rhs: mlxs_array,
        transpose: c_int,
        group_size: c_int,
        bits: c_int,
        mode: *const c_char,
        sorted: c_int,
        out: *mut mlxs_array,
    ) -> c_int;
    pub fn mlxs_rms_norm(x: mlxs_array, w: mlxs_array, eps: f32, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_layer_norm(x: mlxs_array, w: mlxs_array, b: mlxs_array, eps: f32, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_rope(
        x: mlxs_array,
        dims: c_int,
        traditional: c_int,
        base: f32,
        has_base: c_int,
        scale: f32,
        offset: c_int,
        offset_arr: mlxs_array,
        freqs: mlxs_array,
        out: *mut mlxs_array,
    ) -> c_int;
    pub fn mlxs_sdpa(
        q: mlxs_array,
        k: mlxs_array,
        v: mlxs_array,
        scale: f32,
        mask_mode: *const c_char,
        mask: mlxs_array,
        sinks: mlxs_array,
        out: *mut mlxs_array,
    ) -> c_int;
    pub fn mlxs_gated_delta_update(
        q: mlxs_array,
        k: mlxs_array,
        v: mlxs_array,
        g: mlxs_array,
        beta: mlxs_array,
        state: mlxs_array,
        mask: mlxs_array,
        y: *mut mlxs_array,
        state_out: *mut mlxs_array,
    ) -> c_int;
    pub fn mlxs_random_seed(seed: u64) -> c_int;
    pub fn mlxs_random_key(seed: u64, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_random_split(key: mlxs_array, num: c_int, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_random_uniform(
        lo: mlxs_array,
        hi: mlxs_array,
        shape: *const c_int,
        ndim: usize,
        dtype: c_int,
        key: mlxs_array,
        out: *mut mlxs_array,
    ) -> c_int;
    pub fn mlxs_random_normal(
        shape: *const c_int,
        ndim: usize,
        dtype: c_int,
        loc: f32,
        scale: f32,
        key: mlxs_array,
        out: *mut mlxs_array,
    ) -> c_int;
    pub fn mlxs_random_categorical(
        logits: mlxs_array,
        axis: c_int,
        num_samples: c_int,
        key: mlxs_array,
        out: *mut mlxs_array,
    ) -> c_int;
    pub fn mlxs_random_randint(
        lo: mlxs_array,
        hi: mlxs_array,
        shape: *const c_int,
        ndim: usize,
        dtype: c_int,
        key: mlxs_array,
        out: *mut mlxs_array,
    ) -> c_int;
    pub fn mlxs_random_bernoulli(
        p: mlxs_array,
        shape: *const c_int,
        ndim: usize,
        key: mlxs_array,
        out: *mut mlxs_array,
    ) -> c_int;
    pub fn mlxs_random_gumbel(
        shape: *const c_int,
        ndim: usize,
        dtype: c_int,
        key: mlxs_array,
        out: *mut mlxs_array,
    ) -> c_int;
    pub fn mlxs_load_safetensors(path: *const c_char, out: *mut mlxs_tensors) -> c_int;
    pub fn mlxs_load_gguf(path: *const c_char, out: *mut mlxs_tensors) -> c_int;
    pub fn mlxs_tensors_free(t: mlxs_tensors);
    pub fn mlxs_tensors_len(t: mlxs_tensors) -> usize;
    pub fn mlxs_tensors_name(t: mlxs_tensors, i: usize) -> *const c_char;
    pub fn mlxs_tensors_array(t: mlxs_tensors, i: usize, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_tensors_meta_len(t: mlxs_tensors) -> usize;
    pub fn mlxs_tensors_meta_key(t: mlxs_tensors, i: usize) -> *const c_char;
    pub fn mlxs_tensors_meta_kind(t: mlxs_tensors, i: usize) -> c_int;
    pub fn mlxs_tensors_meta_str(t: mlxs_tensors, i: usize) -> *const c_char;
    pub fn mlxs_tensors_meta_strs_len(t: mlxs_tensors, i: usize) -> usize;
    pub fn mlxs_tensors_meta_strs_at(t: mlxs_tensors, i: usize, j: usize) -> *const c_char;
    pub fn mlxs_tensors_meta_array(t: mlxs_tensors, i: usize, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_save_safetensors(
        path: *const c_char,
        names: *const *const c_char,
        arrs: *const mlxs_array,
        n: usize,
        mkeys: *const *const c_char,
        mvals: *const *const c_char,
        nmeta: usize,
    ) -> c_int;
    pub fn mlxs_set_error(msg: *const c_char);
    pub fn mlxs_compile(
        f: mlxs_closure_fn,
        ctx: *mut c_void,
        drop_ctx: Option<unsafe extern "C" fn(*mut c_void)>,
        shapeless: c_int,
        out: *mut mlxs_closure,
    ) -> c_int;
    pub fn mlxs_closure_free(c: mlxs_closure);
    pub fn mlxs_closure_call(
        c: mlxs_closure,
        in_: *const mlxs_array,
        n: usize,
        outs: *mut mlxs_array,
        cap: usize,
        nout: *mut usize,
    ) -> c_int;
    pub fn mlxs_set_compile_enabled(enabled: c_int) -> c_int;
    pub fn mlxs_default_device(type_: *mut c_int, index: *mut c_int) -> c_int;
    pub fn mlxs_set_default_device(type_: c_int, index: c_int) -> c_int;
    pub fn mlxs_device_available(type_: c_int) -> c_int;
    pub fn mlxs_backend() -> c_int;
    pub fn mlxs_new_stream(type_: c_int, index: *mut c_int) -> c_int;
    pub fn mlxs_set_default_stream(type_: c_int, index: c_int) -> c_int;
    pub fn mlxs_default_stream(type_: c_int, index: *mut c_int) -> c_int;
    pub fn mlxs_synchronize_stream(type_: c_int, index: c_int) -> c_int;
    pub fn mlxs_get_active_memory() -> usize;
    pub fn mlxs_get_peak_memory() -> usize;
    pub fn mlxs_reset_peak_memory();
    pub fn mlxs_get_cache_memory() -> usize;
    pub fn mlxs_set_memory_limit(limit: usize) -> usize;
    pub fn mlxs_get_memory_limit() -> usize;
    pub fn mlxs_set_cache_limit(limit: usize) -> usize;
    pub fn mlxs_set_wired_limit(limit: usize) -> usize;
    pub fn mlxs_clear_cache();
    pub fn mlxs_kernel_new(
        backend: c_int,
        name: *const c_char,
        inputs: *const *const c_char,
        nin: usize,
        outputs: *const *const c_char,
        nout: usize,
        source: *const c_char,
        header: *const c_char,
        ensure_row_contiguous: c_int,
        shared_memory: c_int,
        out: *mut mlxs_kernel,
    ) -> c_int;
    pub fn mlxs_kernel_free(k: mlxs_kernel);
    pub fn mlxs_kernel_call(
        k: mlxs_kernel,
        in_: *const mlxs_array,
        nin: usize,
        out_shapes: *const c_int,
        out_ndims: *const usize,
        out_dtypes: *const c_int,
        nout: usize,
        grid: *const c_int,
        block: *const c_int,
        tnames: *const *const c_char,
        tkinds: *const c_int,
        tvals: *const c_int,
        nt: usize,
        init_value: f32,
        has_init: c_int,
        outs: *mut mlxs_array,
    ) -> c_int;
    // ---- distributed ----
    pub fn mlxs_dist_is_available(backend: *const c_char, out: *mut c_int) -> c_int;
    pub fn mlxs_dist_init(backend: *const c_char, strict: c_int, rank: *mut c_int, size: *mut c_int) -> c_int;
    pub fn mlxs_dist_all_sum(x: mlxs_array, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_dist_all_gather(x: mlxs_array, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_dist_all_max(x: mlxs_array, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_dist_send(x: mlxs_array, dst: c_int, out: *mut mlxs_array) -> c_int;
    pub fn mlxs_dist_recv(shape: *const c_int, ndim: usize, dtype: c_int, src: c_int, out: *mut mlxs_array) -> c_int;
}
