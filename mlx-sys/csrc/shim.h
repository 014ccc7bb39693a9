// famlx's C surface over MLX's C++ API.
//
// Every function returns 0 on success and 1 when MLX threw; the message is
// then available from mlxs_last_error() on the same thread. Arrays are opaque
// heap handles (mlx::core::array*), freed with mlxs_array_free.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mlxs_array_s* mlxs_array;
typedef struct mlxs_kernel_s* mlxs_kernel;
typedef struct mlxs_closure_s* mlxs_closure;
typedef struct mlxs_tensors_s* mlxs_tensors;

const char* mlxs_last_error(void);
const char* mlxs_runtime_version(void);
const char* mlxs_build_version(void);

// ---- array lifetime and metadata ----
void mlxs_array_free(mlxs_array a);
int mlxs_array_clone(mlxs_array a, mlxs_array* out);
int mlxs_array_from_data(const void* data, const int* shape, size_t ndim, int dtype, mlxs_array* out);
int mlxs_array_from_f64(double v, int dtype, mlxs_array* out);
int mlxs_array_from_i64(int64_t v, int dtype, mlxs_array* out);
size_t mlxs_array_ndim(mlxs_array a);
const int* mlxs_array_shape(mlxs_array a);
int mlxs_array_dtype(mlxs_array a);
size_t mlxs_array_size(mlxs_array a);
size_t mlxs_array_nbytes(mlxs_array a);
int mlxs_array_to_host(mlxs_array a, int dtype, void* dst, size_t nbytes);
int mlxs_array_item_f64(mlxs_array a, double* out);
int mlxs_array_item_i64(mlxs_array a, int64_t* out);
int mlxs_array_id(mlxs_array a, uintptr_t* out);

// ---- evaluation ----
int mlxs_eval(const mlxs_array* arrs, size_t n);
int mlxs_async_eval(const mlxs_array* arrs, size_t n);
int mlxs_synchronize(void);
int mlxs_graph_census(const mlxs_array* arrs, size_t n, char** out);
void mlxs_string_free(char* s);

// ---- ops by code ----
int mlxs_unary(int op, mlxs_array a, mlxs_array* out);
int mlxs_binary(int op, mlxs_array a, mlxs_array b, mlxs_array* out);
int mlxs_reduce(int op, mlxs_array a, const int* axes, size_t naxes, int all_axes, int keepdims, mlxs_array* out);
int mlxs_arg_reduce(int op, mlxs_array a, int axis, int keepdims, mlxs_array* out);
int mlxs_scan(int op, mlxs_array a, int axis, int reverse, int inclusive, mlxs_array* out);
int mlxs_var(mlxs_array a, const int* axes, size_t naxes, int all_axes, int keepdims, int ddof, int std, mlxs_array* out);
int mlxs_softmax(mlxs_array a, const int* axes, size_t naxes, int precise, mlxs_array* out);

// ---- creation ----
int mlxs_zeros(const int* shape, size_t ndim, int dtype, mlxs_array* out);
int mlxs_ones(const int* shape, size_t ndim, int dtype, mlxs_array* out);
int mlxs_full(const int* shape, size_t ndim, mlxs_array vals, int dtype, mlxs_array* out);
int mlxs_arange(double start, double stop, double step, int dtype, mlxs_array* out);
int mlxs_linspace(double start, double stop, int num, int dtype, mlxs_array* out);
int mlxs_eye(int n, int m, int k, int dtype, mlxs_array* out);
int mlxs_tri(int n, int m, int k, int dtype, mlxs_array* out);
int mlxs_tril(mlxs_array a, int k, mlxs_array* out);
int mlxs_triu(mlxs_array a, int k, mlxs_array* out);

// ---- shape and indexing ----
int mlxs_astype(mlxs_array a, int dtype, mlxs_array* out);
int mlxs_view(mlxs_array a, int dtype, mlxs_array* out);
int mlxs_reshape(mlxs_array a, const int* shape, size_t ndim, mlxs_array* out);
int mlxs_transpose(mlxs_array a, const int* axes, size_t naxes, mlxs_array* out);
int mlxs_squeeze(mlxs_array a, const int* axes, size_t naxes, mlxs_array* out);
int mlxs_expand_dims(mlxs_array a, const int* axes, size_t naxes, mlxs_array* out);
int mlxs_broadcast_to(mlxs_array a, const int* shape, size_t ndim, mlxs_array* out);
int mlxs_flatten(mlxs_array a, int start, int end, mlxs_array* out);
int mlxs_contiguous(mlxs_array a, mlxs_array* out);
int mlxs_slice(mlxs_array a, const int* start, const int* stop, const int* strides, size_t n, mlxs_array* out);
int mlxs_slice_dynamic(mlxs_array a, mlxs_array start, const int* axes, size_t naxes, const int* sizes, size_t nsizes, mlxs_array* out);
int mlxs_slice_update(mlxs_array src, mlxs_array upd, const int* start, const int* stop, const int* strides, size_t n, mlxs_array* out);
int mlxs_slice_update_dynamic(mlxs_array src, mlxs_array upd, mlxs_array start, const int* axes, size_t naxes, mlxs_array* out);
int mlxs_take(mlxs_array a, mlxs_array idx, int axis, int has_axis, mlxs_array* out);
int mlxs_take_along_axis(mlxs_array a, mlxs_array idx, int axis, mlxs_array* out);
int mlxs_put_along_axis(mlxs_array a, mlxs_array idx, mlxs_array vals, int axis, mlxs_array* out);
int mlxs_scatter(int op, mlxs_array a, const mlxs_array* idx, size_t nidx, mlxs_array upd, const int* axes, size_t naxes, mlxs_array* out);
int mlxs_where(mlxs_array c, mlxs_array x, mlxs_array y, mlxs_array* out);
int mlxs_pad(mlxs_array a, const int* axes, const int* low, const int* high, size_t n, mlxs_array val, const char* mode, mlxs_array* out);
int mlxs_concatenate(const mlxs_array* arrs, size_t n, int axis, mlxs_array* out);
int mlxs_stack(const mlxs_array* arrs, size_t n, int axis, mlxs_array* out);
int mlxs_split_sections(mlxs_array a, int num, int axis, mlxs_array* outs, size_t cap, size_t* nout);
int mlxs_split_indices(mlxs_array a, const int* idx, size_t nidx, int axis, mlxs_array* outs, size_t cap, size_t* nout);
int mlxs_repeat(mlxs_array a, int repeats, int axis, mlxs_array* out);
int mlxs_tile(mlxs_array a, const int* reps, size_t n, mlxs_array* out);
int mlxs_flip(mlxs_array a, int axis, mlxs_array* out);
int mlxs_roll(mlxs_array a, int shift, int axis, mlxs_array* out);
int mlxs_sort(mlxs_array a, int axis, int arg, mlxs_array* out);
int mlxs_partition(mlxs_array a, int kth, int axis, int arg, mlxs_array* out);
int mlxs_topk(mlxs_array a, int k, int axis, mlxs_array* out);
int mlxs_clip(mlxs_array a, mlxs_array lo, mlxs_array hi, mlxs_array* out);
int mlxs_as_strided(mlxs_array a, const int* shape, size_t ndim, const int64_t* strides, size_t offset, mlxs_array* out);

// ---- linear algebra and convolution ----
int mlxs_matmul(mlxs_array a, mlxs_array b, mlxs_array* out);
int mlxs_addmm(mlxs_array c, mlxs_array a, mlxs_array b, float alpha, float beta, mlxs_array* out);
int mlxs_conv(mlxs_array x, mlxs_array w, const int* stride, const int* padding, const int* dilation, size_t nspatial, int groups, mlxs_array* out);
int mlxs_conv_transpose(mlxs_array x, mlxs_array w, const int* stride, const int* padding, const int* dilation, const int* output_padding, size_t nspatial, int groups, mlxs_array* out);
int mlxs_fft(int op, mlxs_array a, int n, int axis, mlxs_array* out);

// ---- quantization ----
int mlxs_quantize(mlxs_array w, int group_size, int bits, const char* mode, mlxs_array* wq, mlxs_array* scales, mlxs_array* biases);
int mlxs_dequantize(mlxs_array w, mlxs_array scales, mlxs_array biases, int group_size, int bits, const char* mode, int dtype, mlxs_array* out);
int mlxs_quantized_matmul(mlxs_array x, mlxs_array w, mlxs_array scales, mlxs_array biases, int transpose, int group_size, int bits, const char* mode, mlxs_array* out);
int mlxs_gather_mm(mlxs_array a, mlxs_array b, mlxs_array lhs, mlxs_array rhs, int sorted, mlxs_array* out);
int mlxs_gather_qmm(mlxs_array x, mlxs_array w, mlxs_array scales, mlxs_array biases, mlxs_array lhs, mlxs_array rhs, int transpose, int group_size, int bits, const char* mode, int sorted, mlxs_array* out);

// ---- fast ----
int mlxs_rms_norm(mlxs_array x, mlxs_array w, float eps, mlxs_array* out);
// silu(gate) * up as famlx's CPU primitive, or *out = NULL where it does not apply.
int mlxs_cpu_swiglu(mlxs_array gate, mlxs_array up, mlxs_array* out);
int mlxs_layer_norm(mlxs_array x, mlxs_array w, mlxs_array b, float eps, mlxs_array* out);
int mlxs_rope(mlxs_array x, int dims, int traditional, float base, int has_base, float scale, int offset, mlxs_array offset_arr, mlxs_array freqs, mlxs_array* out);
int mlxs_sdpa(mlxs_array q, mlxs_array k, mlxs_array v, float scale, const char* mask_mode, mlxs_array mask, mlxs_array sinks, mlxs_array* out);
int mlxs_gated_delta_update(mlxs_array q, mlxs_array k, mlxs_array v, mlxs_array g, mlxs_array beta, mlxs_array state, mlxs_array mask, mlxs_array* y, mlxs_array* state_out);

// ---- random ----
int mlxs_random_seed(uint64_t seed);
int mlxs_random_key(uint64_t seed, mlxs_array* out);
int mlxs_random_split(mlxs_array key, int num, mlxs_array* out);
int mlxs_random_uniform(mlxs_array lo, mlxs_array hi, const int* shape, size_t ndim, int dtype, mlxs_array key, mlxs_array* out);
int mlxs_random_normal(const int* shape, size_t ndim, int dtype, float loc, float scale, mlxs_array key, mlxs_array* out);
int mlxs_random_categorical(mlxs_array logits, int axis, int num_samples, mlxs_array key, mlxs_array* out);
int mlxs_random_randint(mlxs_array lo, mlxs_array hi, const int* shape, size_t ndim, int dtype, mlxs_array key, mlxs_array* out);
int mlxs_random_bernoulli(mlxs_array p, const int* shape, size_t ndim, mlxs_array key, mlxs_array* out);
int mlxs_random_gumbel(const int* shape, size_t ndim, int dtype, mlxs_array key, mlxs_array* out);

// ---- io: a loaded tensor collection (safetensors or GGUF) ----
int mlxs_load_safetensors(const char* path, mlxs_tensors* out);
int mlxs_load_gguf(const char* path, mlxs_tensors* out);
void mlxs_tensors_free(mlxs_tensors t);
size_t mlxs_tensors_len(mlxs_tensors t);
const char* mlxs_tensors_name(mlxs_tensors t, size_t i);
int mlxs_tensors_array(mlxs_tensors t, size_t i, mlxs_array* out);
size_t mlxs_tensors_meta_len(mlxs_tensors t);
const char* mlxs_tensors_meta_key(mlxs_tensors t, size_t i);
// kind: 0 string, 1 array, 2 list of strings, 3 none
int mlxs_tensors_meta_kind(mlxs_tensors t, size_t i);
const char* mlxs_tensors_meta_str(mlxs_tensors t, size_t i);
size_t mlxs_tensors_meta_strs_len(mlxs_tensors t, size_t i);
const char* mlxs_tensors_meta_strs_at(mlxs_tensors t, size_t i, size_t j);
int mlxs_tensors_meta_array(mlxs_tensors t, size_t i, mlxs_array* out);
int mlxs_save_safetensors(const char* path, const char* const* names, const mlxs_array* arrs, size_t n, const char* const* mkeys, const char* const* mvals, size_t nmeta);

// ---- compile ----
// The callback receives n inputs (borrowed) and must write up to cap outputs
// (owned, transferred) and their count; it returns 0 or 1 (error, message set
// through mlxs_set_error).
typedef int (*mlxs_closure_fn)(void* ctx, const mlxs_array* in, size_t n, mlxs_array* out, size_t cap, size_t* nout);
void mlxs_set_error(const char* msg);
int mlxs_compile(mlxs_closure_fn f, void* ctx, void (*drop_ctx)(void*), int shapeless, mlxs_closure* out);
void mlxs_closure_free(mlxs_closure c);
int mlxs_closure_call(mlxs_closure c, const mlxs_array* in, size_t n, mlxs_array* outs, size_t cap, size_t* nout);
int mlxs_set_compile_enabled(int enabled);

// ---- devices, streams and backend ----
// device type: 0 cpu, 1 gpu
int mlxs_default_device(int* type, int* index);
int mlxs_set_default_device(int type, int index);
int mlxs_device_available(int type);
// 0 cpu only, 1 metal, 2 cuda
int mlxs_backend(void);
int mlxs_new_stream(int type, int* index);
int mlxs_set_default_stream(int type, int index);
// the calling thread's default stream on a device
int mlxs_default_stream(int type, int* index);
int mlxs_synchronize_stream(int type, int index);

// ---- memory ----
size_t mlxs_get_active_memory(void);
size_t mlxs_get_peak_memory(void);
void mlxs_reset_peak_memory(void);
size_t mlxs_get_cache_memory(void);
size_t mlxs_set_memory_limit(size_t limit);
size_t mlxs_get_memory_limit(void);
size_t mlxs_set_cache_limit(size_t limit);
size_t mlxs_set_wired_limit(size_t limit);
void mlxs_clear_cache(void);

// ---- custom kernels ----
// backend: 1 metal, 2 cuda
int mlxs_kernel_new(int backend, const char* name, const char* const* inputs, size_t nin, const char* const* outputs, size_t nout, const char* source, const char* header, int ensure_row_contiguous, int shared_memory, mlxs_kernel* out);
void mlxs_kernel_free(mlxs_kernel k);
// template args: names[i] with kind[i] (0 int, 1 bool, 2 dtype) and value[i]
int mlxs_kernel_call(mlxs_kernel k, const mlxs_array* in, size_t nin,
                     const int* out_shapes, const size_t* out_ndims, const int* out_dtypes, size_t nout,
                     const int* grid, const int* block,
                     const char* const* tnames, const int* tkinds, const int* tvals, size_t nt,
                     float init_value, int has_init, mlxs_array* outs);

// ---- distributed (MLX's global group; see shim.cpp) ----
int mlxs_dist_is_available(const char* backend, int* out);
int mlxs_dist_init(const char* backend, int strict, int* rank, int* size);
int mlxs_dist_all_sum(mlxs_array x, mlxs_array* out);
int mlxs_dist_all_gather(mlxs_array x, mlxs_array* out);
int mlxs_dist_all_max(mlxs_array x, mlxs_array* out);
int mlxs_dist_send(mlxs_array x, int dst, mlxs_array* out);
int mlxs_dist_recv(const int* shape, size_t ndim, int dtype, int src, mlxs_array* out);

#ifdef __cplusplus
}
#endif
