// famlx's C shim over MLX's C++ API. No exception leaves this file: each entry
// point catches, stores the message for mlxs_last_error and returns 1.
#include "shim.h"
#include "cpu_ops.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "mlx/backend/cuda/cuda.h"
#include "mlx/backend/metal/metal.h"
#include "mlx/compile_impl.h"
#include "mlx/mlx.h"
#include "mlx/primitives.h"

namespace mx = mlx::core;

#define MLXS_API extern "C" __attribute__((visibility("default")))

namespace {

thread_local std::string g_err;

int fail(const char* what) {
  g_err = what;
  return 1;
}

#define TRY(...)                                 \
  try {                                          \
    __VA_ARGS__;                                 \
    return 0;                                    \
  } catch (const std::exception& e) {            \
    return fail(e.what());                       \
  } catch (...) {                                \
    return fail("unknown C++ exception in MLX"); \
  }

inline mx::array& A(mlxs_array a) {
  if (!a) throw std::invalid_argument("null array handle");
  return *reinterpret_cast<mx::array*>(a);
}
inline std::optional<mx::array> OA(mlxs_array a) {
  if (!a) return std::nullopt;
  return *reinterpret_cast<mx::array*>(a);
}
inline mlxs_array H(mx::array a) {
  return reinterpret_cast<mlxs_array>(new mx::array(std::move(a)));
}
inline mx::Shape S(const int* s, size_t n) { return mx::Shape(s, s + n); }
inline std::vector<int> V(const int* s, size_t n) {
  return std::vector<int>(s, s + n);
}
inline std::vector<mx::array> VA(const mlxs_array* a, size_t n) {
  std::vector<mx::array> v;
  v.reserve(n);
  for (size_t i = 0; i < n; i++) v.push_back(A(a[i]));
  return v;
}

// Our dtype codes, stable across MLX versions.
mx::Dtype D(int code) {
  switch (code) {
    case 0: return mx::bool_;
    case 1: return mx::uint8;
    case 2: return mx::uint16;
    case 3: return mx::uint32;
    case 4: return mx::uint64;
    case 5: return mx::int8;
    case 6: return mx::int16;
    case 7: return mx::int32;
    case 8: return mx::int64;
    case 9: return mx::float16;
    case 10: return mx::float32;
    case 11: return mx::float64;
    case 12: return mx::bfloat16;
    case 13: return mx::complex64;
  }
  throw std::invalid_argument("unknown dtype code " + std::to_string(code));
}
int DC(mx::Dtype d) {
  switch (d.val()) {
    case mx::Dtype::Val::bool_: return 0;
    case mx::Dtype::Val::uint8: return 1;
    case mx::Dtype::Val::uint16: return 2;
    case mx::Dtype::Val::uint32: return 3;
    case mx::Dtype::Val::uint64: return 4;
    case mx::Dtype::Val::int8: return 5;
    case mx::Dtype::Val::int16: return 6;
    case mx::Dtype::Val::int32: return 7;
    case mx::Dtype::Val::int64: return 8;
    case mx::Dtype::Val::float16: return 9;
    case mx::Dtype::Val::float32: return 10;
    case mx::Dtype::Val::float64: return 11;
    case mx::Dtype::Val::bfloat16: return 12;
    case mx::Dtype::Val::complex64: return 13;
  }
  return -1;
}

std::vector<int> axes_or_all(const int* axes, size_t n, int all, int ndim) {
  if (!all) return V(axes, n);
  std::vector<int> v(ndim);
  for (int i = 0; i < ndim; i++) v[i] = i;
  return v;
}

struct Tensors {
  std::vector<std::string> names;
  std::vector<mx::array> arrays;
  std::vector<std::string> meta_keys;
  std::vector<mx::GGUFMetaData> meta;
};

struct Closure {
  std::function<std::vector<mx::array>(const std::vector<mx::array>&)> fn;
  // Key of this closure in MLX's compile cache: a number never reused (so a
  // stale entry can never be replayed for another closure), erased on free
  // so dropped functions do not keep their traced graphs alive.
  std::uintptr_t id = 0;
  ~Closure() {
    if (id) {
      try {
        mx::detail::compile_erase(mx::detail::compile_cache(), id);
      } catch (...) {
      }
    }
  }
};

struct Kernel {
  int backend;
  mx::fast::CustomKernelFunction fn;
};

}  // namespace

MLXS_API const char* mlxs_last_error(void) { return g_err.c_str(); }
MLXS_API void mlxs_set_error(const char* msg) { g_err = msg ? msg : ""; }
MLXS_API const char* mlxs_runtime_version(void) { return mx::version(); }
MLXS_API const char* mlxs_build_version(void) {
  static std::string v = std::to_string(MLX_VERSION_MAJOR) + "." +
      std::to_string(MLX_VERSION_MINOR) + "." +
      std::to_string(MLX_VERSION_PATCH);
  return v.c_str();
}

// ---- array lifetime and metadata ----
MLXS_API void mlxs_array_free(mlxs_array a) {
  delete reinterpret_cast<mx::array*>(a);
}
MLXS_API int mlxs_array_clone(mlxs_array a, mlxs_array* out) {
  TRY(*out = H(A(a)))
}

template <typename T>
mx::array from_typed(const void* data, mx::Shape shape, mx::Dtype dt) {
  return mx::array(static_cast<const T*>(data), std::move(shape), dt);
}

MLXS_API int mlxs_array_from_data(const void* data, const int* shape, size_t ndim, int dtype, mlxs_array* out) {
  TRY({
    auto dt = D(dtype);
    auto sh = S(shape, ndim);
    switch (dtype) {
      case 0: *out = H(from_typed<bool>(data, sh, dt)); break;
      case 1: *out = H(from_typed<uint8_t>(data, sh, dt)); break;
      case 2: *out = H(from_typed<uint16_t>(data, sh, dt)); break;
      case 3: *out = H(from_typed<uint32_t>(data, sh, dt)); break;
      case 4: *out = H(from_typed<uint64_t>(data, sh, dt)); break;
      case 5: *out = H(from_typed<int8_t>(data, sh, dt)); break;
      case 6: *out = H(from_typed<int16_t>(data, sh, dt)); break;
      case 7: *out = H(from_typed<int32_t>(data, sh, dt)); break;
      case 8: *out = H(from_typed<int64_t>(data, sh, dt)); break;
      case 9: *out = H(from_typed<mx::float16_t>(data, sh, dt)); break;
      case 10: *out = H(from_typed<float>(data, sh, dt)); break;
      case 11: *out = H(from_typed<double>(data, sh, dt)); break;
      case 12: *out = H(from_typed<mx::bfloat16_t>(data, sh, dt)); break;
      case 13: *out = H(from_typed<mx::complex64_t>(data, sh, dt)); break;
      default: throw std::invalid_argument("bad dtype");
    }
  })
}
MLXS_API int mlxs_array_from_f64(double v, int dtype, mlxs_array* out) {
  // Converted on the host: one graph node, no AsType (as a Python scalar).
  TRY(*out = H(mx::array(v, D(dtype))))
}
MLXS_API int mlxs_array_from_i64(int64_t v, int dtype, mlxs_array* out) {
  TRY(*out = H(mx::array(v, D(dtype))))
}
MLXS_API size_t mlxs_array_ndim(mlxs_array a) { return A(a).ndim(); }
MLXS_API const int* mlxs_array_shape(mlxs_array a) { return A(a).shape().data(); }
MLXS_API int mlxs_array_dtype(mlxs_array a) { return DC(A(a).dtype()); }
MLXS_API size_t mlxs_array_size(mlxs_array a) { return A(a).size(); }
MLXS_API size_t mlxs_array_nbytes(mlxs_array a) { return A(a).nbytes(); }
MLXS_API int mlxs_array_id(mlxs_array a, uintptr_t* out) { TRY(*out = A(a).id()) }

MLXS_API int mlxs_array_to_host(mlxs_array a, int dtype, void* dst, size_t nbytes) {
  TRY({
    auto x = mx::contiguous(mx::astype(A(a), D(dtype)));
    x.eval();
    if (x.nbytes() != nbytes)
      throw std::invalid_argument("to_host: buffer of " + std::to_string(nbytes) +
                                  " bytes for an array of " + std::to_string(x.nbytes()));
    if (nbytes) std::memcpy(dst, x.data<uint8_t>(), nbytes);
  })
}
MLXS_API int mlxs_array_item_f64(mlxs_array a, double* out) {
  TRY({
    if (A(a).size() != 1) throw std::invalid_argument("item() needs an array of one element");
    auto x = mx::astype(A(a), mx::float32);
    x.eval();
    *out = x.item<float>();
  })
}
MLXS_API int mlxs_array_item_i64(mlxs_array a, int64_t* out) {
  TRY({
    auto& x = A(a);
    if (x.size() != 1) throw std::invalid_argument("item() needs an array of one element");
    // Token ids are int32/uint32: read them without building a cast node
    // (one fewer kernel launch and graph evaluation per generated token).
    if (x.dtype() == mx::int32 || x.dtype() == mx::uint32) {
      x.eval();
      *out = x.dtype() == mx::int32 ? x.item<int32_t>() : x.item<uint32_t>();
    } else {
      auto y = mx::astype(x, mx::int64);
      y.eval();
      *out = y.item<int64_t>();
    }
  })
}

// ---- evaluation ----
MLXS_API int mlxs_eval(const mlxs_array* arrs, size_t n) { TRY(mx::eval(VA(arrs, n))) }
MLXS_API int mlxs_async_eval(const mlxs_array* arrs, size_t n) { TRY(mx::async_eval(VA(arrs, n))) }
MLXS_API int mlxs_synchronize(void) { TRY(mx::synchronize()) }

// Census of the unevaluated graph behind `arrs`: "name count" lines, one
// per primitive kind, most frequent first; each multi-output node counted
// once (siblings are one node). A diagnostic for how much work a decode step asks MLX to schedule.
MLXS_API int mlxs_graph_census(const mlxs_array* arrs, size_t n, char** out) {
  TRY({
    std::unordered_map<std::uintptr_t, bool> seen;
    std::unordered_map<std::string, size_t> counts;
    std::vector<mx::array> stack = VA(arrs, n);
    while (!stack.empty()) {
      mx::array a = std::move(stack.back());
      stack.pop_back();
      if (a.status() != mx::array::Status::unscheduled || !a.has_primitive()) continue;
      // Keyed by array, not primitive: a compiled function's calls share
      // one primitive object.
      if (!seen.emplace(a.id(), true).second) continue;
      for (auto& sib : a.siblings()) seen.emplace(sib.id(), true);
      counts[a.primitive().name()]++;
      for (auto& in : a.inputs()) stack.push_back(in);
    }
    std::vector<std::pair<std::string, size_t>> v(counts.begin(), counts.end());
    std::sort(v.begin(), v.end(), [](auto& x, auto& y) { return x.second > y.second || (x.second == y.second && x.first < y.first); });
    std::string txt;
    for (auto& [k, c] : v) txt += k + " " + std::to_string(c) + "\n";
    *out = strdup(txt.c_str());
  })
}
MLXS_API void mlxs_string_free(char* s) { free(s); }

// ---- ops by code ----
// Codes must match mlx/src/ops.rs (UnaryOp, BinaryOp, ReduceOp, ScanOp).
MLXS_API int mlxs_unary(int op, mlxs_array a, mlxs_array* out) {
  TRY({
    auto& x = A(a);
    mx::array r = [&]() -> mx::array {
      switch (op) {
        case 0: return mx::abs(x);
        case 1: return mx::negative(x);
        case 2: return mx::exp(x);
        case 3: return mx::log(x);
        case 4: return mx::log1p(x);
        case 5: return mx::sqrt(x);
        case 6: return mx::rsqrt(x);
        case 7: return mx::square(x);
        case 8: return mx::sin(x);
        case 9: return mx::cos(x);
        case 10: return mx::tanh(x);
        case 11: return mx::sigmoid(x);
        case 12: return mx::erf(x);
        case 13: return mx::floor(x);
        case 14: return mx::ceil(x);
        case 15: return mx::round(x);
        case 16: return mx::sign(x);
        case 17: return mx::reciprocal(x);
        case 18: return mx::logical_not(x);
        case 19: return mx::isnan(x);
        case 20: return mx::isinf(x);
        case 21: return mx::stop_gradient(x);
        case 22: return mx::log2(x);
        case 23: return mx::log10(x);
        case 24: return mx::tan(x);
        case 25: return mx::erfinv(x);
        case 26: return mx::expm1(x);
        case 27: return mx::copy(x);
        case 28: return mx::isfinite(x);
        case 29: return mx::real(x);
        case 30: return mx::imag(x);
        case 31: return mx::bitwise_invert(x);
        case 32: return mx::arctan(x);
        case 33: return mx::sinh(x);
        case 34: return mx::cosh(x);
      }
      throw std::invalid_argument("unknown unary op " + std::to_string(op));
    }();
    *out = H(std::move(r));
  })
}

MLXS_API int mlxs_binary(int op, mlxs_array a, mlxs_array b, mlxs_array* out) {
  TRY({
    auto& x = A(a);
    auto& y = A(b);
    mx::array r = [&]() -> mx::array {
      switch (op) {
        case 0: return mx::add(x, y);
        case 1: return mx::subtract(x, y);
        case 2: return mx::multiply(x, y);
        case 3: return mx::divide(x, y);
        case 4: return mx::maximum(x, y);
        case 5: return mx::minimum(x, y);
        case 6: return mx::power(x, y);
        case 7: return mx::remainder(x, y);
        case 8: return mx::equal(x, y);
        case 9: return mx::not_equal(x, y);
        case 10: return mx::less(x, y);
        case 11: return mx::less_equal(x, y);
        case 12: return mx::greater(x, y);
        case 13: return mx::greater_equal(x, y);
        case 14: return mx::logical_and(x, y);
        case 15: return mx::logical_or(x, y);
        case 16: return mx::logaddexp(x, y);
        case 17: return mx::arctan2(x, y);
        case 18: return mx::floor_divide(x, y);
        case 19: return mx::bitwise_and(x, y);
        case 20: return mx::bitwise_or(x, y);
        case 21: return mx::bitwise_xor(x, y);
        case 22: return mx::left_shift(x, y);
        case 23: return mx::right_shift(x, y);
        case 24: return mx::outer(x, y);
        case 25: return mx::inner(x, y);
      }
      throw std::invalid_argument("unknown binary op " + std::to_string(op));
    }();
    *out = H(std::move(r));
  })
}

MLXS_API int mlxs_reduce(int op, mlxs_array a, const int* axes, size_t naxes, int all_axes, int keepdims, mlxs_array* out) {
  TRY({
    auto& x = A(a);
    auto ax = axes_or_all(axes, naxes, all_axes, x.ndim());
    bool kd = keepdims != 0;
    mx::array r = [&]() -> mx::array {
      switch (op) {
        case 0: return mx::sum(x, ax, kd);
        case 1: return mx::mean(x, ax, kd);
        case 2: return mx::max(x, ax, kd);
        case 3: return mx::min(x, ax, kd);
        case 4: return mx::prod(x, ax, kd);
        case 5: return mx::all(x, ax, kd);
        case 6: return mx::any(x, ax, kd);
        case 7: return mx::logsumexp(x, ax, kd);
      }
      throw std::invalid_argument("unknown reduce op " + std::to_string(op));
    }();
    *out = H(std::move(r));
  })
}

MLXS_API int mlxs_arg_reduce(int op, mlxs_array a, int axis, int keepdims, mlxs_array* out) {
  TRY(*out = H(op == 0 ? mx::argmax(A(a), axis, keepdims != 0) : mx::argmin(A(a), axis, keepdims != 0)))
}

MLXS_API int mlxs_scan(int op, mlxs_array a, int axis, int reverse, int inclusive, mlxs_array* out) {
  TRY({
    auto& x = A(a);
    bool rv = reverse != 0, inc = inclusive != 0;
    mx::array r = [&]() -> mx::array {
      switch (op) {
        case 0: return mx::cumsum(x, axis, rv, inc);
        case 1: return mx::cumprod(x, axis, rv, inc);
        case 2: return mx::cummax(x, axis, rv, inc);
        case 3: return mx::cummin(x, axis, rv, inc);
        case 4: return mx::logcumsumexp(x, axis, rv, inc);
      }
      throw std::invalid_argument("unknown scan op " + std::to_string(op));
    }();
    *out = H(std::move(r));
  })
}

MLXS_API int mlxs_var(mlxs_array a, const int* axes, size_t naxes, int all_axes, int keepdims, int ddof, int std, mlxs_array* out) {
  TRY({
    auto ax = axes_or_all(axes, naxes, all_axes, A(a).ndim());
    *out = H(std ? mx::std(A(a), ax, keepdims != 0, ddof) : mx::var(A(a), ax, keepdims != 0, ddof));
  })
}

MLXS_API int mlxs_softmax(mlxs_array a, const int* axes, size_t naxes, int precise, mlxs_array* out) {
  TRY(*out = H(mx::softmax(A(a), V(axes, naxes), precise != 0)))
}

// ---- creation ----
MLXS_API int mlxs_zeros(const int* shape, size_t ndim, int dtype, mlxs_array* out) {
  TRY(*out = H(mx::zeros(S(shape, ndim), D(dtype))))
}
MLXS_API int mlxs_ones(const int* shape, size_t ndim, int dtype, mlxs_array* out) {
  TRY(*out = H(mx::ones(S(shape, ndim), D(dtype))))
}
MLXS_API int mlxs_full(const int* shape, size_t ndim, mlxs_array vals, int dtype, mlxs_array* out) {
  TRY(*out = H(mx::full(S(shape, ndim), A(vals), D(dtype))))
}
MLXS_API int mlxs_arange(double start, double stop, double step, int dtype, mlxs_array* out) {
  TRY(*out = H(mx::arange(start, stop, step, D(dtype))))
}
MLXS_API int mlxs_linspace(double start, double stop, int num, int dtype, mlxs_array* out) {
  TRY(*out = H(mx::linspace(start, stop, num, D(dtype))))
}
MLXS_API int mlxs_eye(int n, int m, int k, int dtype, mlxs_array* out) {
  TRY(*out = H(mx::eye(n, m, k, D(dtype))))
}
MLXS_API int mlxs_tri(int n, int m, int k, int dtype, mlxs_array* out) {
  TRY(*out = H(mx::tri(n, m, k, D(dtype))))
}
MLXS_API int mlxs_tril(mlxs_array a, int k, mlxs_array* out) { TRY(*out = H(mx::tril(A(a), k))) }
MLXS_API int mlxs_triu(mlxs_array a, int k, mlxs_array* out) { TRY(*out = H(mx::triu(A(a), k))) }

// ---- shape and indexing ----
MLXS_API int mlxs_astype(mlxs_array a, int dtype, mlxs_array* out) { TRY(*out = H(mx::astype(A(a), D(dtype)))) }
MLXS_API int mlxs_view(mlxs_array a, int dtype, mlxs_array* out) { TRY(*out = H(mx::view(A(a), D(dtype)))) }
MLXS_API int mlxs_reshape(mlxs_array a, const int* shape, size_t ndim, mlxs_array* out) {
  TRY(*out = H(mx::reshape(A(a), S(shape, ndim))))
}
MLXS_API int mlxs_transpose(mlxs_array a, const int* axes, size_t naxes, mlxs_array* out) {
  TRY(*out = H(axes ? mx::transpose(A(a), V(axes, naxes)) : mx::transpose(A(a))))
}
MLXS_API int mlxs_squeeze(mlxs_array a, const int* axes, size_t naxes, mlxs_array* out) {
  TRY(*out = H(axes ? mx::squeeze(A(a), V(axes, naxes)) : mx::squeeze(A(a))))
}
MLXS_API int mlxs_expand_dims(mlxs_array a, const int* axes, size_t naxes, mlxs_array* out) {
  TRY(*out = H(mx::expand_dims(A(a), V(axes, naxes))))
}
MLXS_API int mlxs_broadcast_to(mlxs_array a, const int* shape, size_t ndim, mlxs_array* out) {
  TRY(*out = H(mx::broadcast_to(A(a), S(shape, ndim))))
}
MLXS_API int mlxs_flatten(mlxs_array a, int start, int end, mlxs_array* out) {
  TRY(*out = H(mx::flatten(A(a), start, end)))
}
MLXS_API int mlxs_contiguous(mlxs_array a, mlxs_array* out) { TRY(*out = H(mx::contiguous(A(a)))) }
MLXS_API int mlxs_slice(mlxs_array a, const int* start, const int* stop, const int* strides, size_t n, mlxs_array* out) {
  TRY(*out = H(mx::slice(A(a), S(start, n), S(stop, n), S(strides, n))))
}
MLXS_API int mlxs_slice_dynamic(mlxs_array a, mlxs_array start, const int* axes, size_t naxes, const int* sizes, size_t nsizes, mlxs_array* out) {
  TRY(*out = H(mx::slice(A(a), A(start), V(axes, naxes), S(sizes, nsizes))))
}
MLXS_API int mlxs_slice_update(mlxs_array src, mlxs_array upd, const int* start, const int* stop, const int* strides, size_t n, mlxs_array* out) {
  TRY(*out = H(mx::slice_update(A(src), A(upd), S(start, n), S(stop, n), S(strides, n))))
}
MLXS_API int mlxs_slice_update_dynamic(mlxs_array src, mlxs_array upd, mlxs_array start, const int* axes, size_t naxes, mlxs_array* out) {
  TRY(*out = H(mx::slice_update(A(src), A(upd), A(start), V(axes, naxes))))
}
MLXS_API int mlxs_take(mlxs_array a, mlxs_array idx, int axis, int has_axis, mlxs_array* out) {
  TRY(*out = H(has_axis ? mx::take(A(a), A(idx), axis) : mx::take(A(a), A(idx))))
}
MLXS_API int mlxs_take_along_axis(mlxs_array a, mlxs_array idx, int axis, mlxs_array* out) {
  TRY(*out = H(mx::take_along_axis(A(a), A(idx), axis)))
}
MLXS_API int mlxs_put_along_axis(mlxs_array a, mlxs_array idx, mlxs_array vals, int axis, mlxs_array* out) {
  TRY(*out = H(mx::put_along_axis(A(a), A(idx), A(vals), axis)))
}
MLXS_API int mlxs_scatter(int op, mlxs_array a, const mlxs_array* idx, size_t nidx, mlxs_array upd, const int* axes, size_t naxes, mlxs_array* out) {
  TRY({
    auto ix = VA(idx, nidx);
    auto ax = V(axes, naxes);
    auto& x = A(a);
    auto& u = A(upd);
    mx::array r = [&]() -> mx::array {
      switch (op) {
        case 0: return mx::scatter(x, ix, u, ax);
        case 1: return mx::scatter_add(x, ix, u, ax);
        case 2: return mx::scatter_prod(x, ix, u, ax);
        case 3: return mx::scatter_max(x, ix, u, ax);
        case 4: return mx::scatter_min(x, ix, u, ax);
      }
      throw std::invalid_argument("unknown scatter op " + std::to_string(op));
    }();
    *out = H(std::move(r));
  })
}
MLXS_API int mlxs_where(mlxs_array c, mlxs_array x, mlxs_array y, mlxs_array* out) {
  TRY(*out = H(mx::where(A(c), A(x), A(y))))
}
MLXS_API int mlxs_pad(mlxs_array a, const int* axes, const int* low, const int* high, size_t n, mlxs_array val, const char* mode, mlxs_array* out) {
  TRY(*out = H(mx::pad(A(a), V(axes, n), S(low, n), S(high, n), A(val), std::string(mode ? mode : "constant"))))
}
MLXS_API int mlxs_concatenate(const mlxs_array* arrs, size_t n, int axis, mlxs_array* out) {
  TRY(*out = H(mx::concatenate(VA(arrs, n), axis)))
}
MLXS_API int mlxs_stack(const mlxs_array* arrs, size_t n, int axis, mlxs_array* out) {
  TRY(*out = H(mx::stack(VA(arrs, n), axis)))
}

static void put_many(std::vector<mx::array> v, mlxs_array* outs, size_t cap, size_t* nout) {
  if (v.size() > cap) throw std::invalid_argument("too many outputs for the buffer");
  for (size_t i = 0; i < v.size(); i++) outs[i] = H(std::move(v[i]));
  *nout = v.size();
}
MLXS_API int mlxs_split_sections(mlxs_array a, int num, int axis, mlxs_array* outs, size_t cap, size_t* nout) {
  TRY(put_many(mx::split(A(a), num, axis), outs, cap, nout))
}
MLXS_API int mlxs_split_indices(mlxs_array a, const int* idx, size_t nidx, int axis, mlxs_array* outs, size_t cap, size_t* nout) {
  TRY(put_many(mx::split(A(a), S(idx, nidx), axis), outs, cap, nout))
}
MLXS_API int mlxs_repeat(mlxs_array a, int repeats, int axis, mlxs_array* out) {
  TRY(*out = H(mx::repeat(A(a), repeats, axis)))
}
MLXS_API int mlxs_tile(mlxs_array a, const int* reps, size_t n, mlxs_array* out) {
  TRY(*out = H(mx::tile(A(a), V(reps, n))))
}
MLXS_API int mlxs_flip(mlxs_array a, int axis, mlxs_array* out) {
  TRY({
    auto& x = A(a);
    int ax = axis < 0 ? axis + (int)x.ndim() : axis;
    if (ax < 0 || ax >= (int)x.ndim()) throw std::invalid_argument("flip: axis out of range");
    mx::Shape start(x.ndim(), 0), stop = x.shape(), strides(x.ndim(), 1);
    start[ax] = x.shape(ax) - 1;
    stop[ax] = -x.shape(ax) - 1;
    strides[ax] = -1;
    *out = H(mx::slice(x, start, stop, strides));
  })
}
MLXS_API int mlxs_roll(mlxs_array a, int shift, int axis, mlxs_array* out) {
  TRY(*out = H(mx::roll(A(a), shift, axis)))
}
MLXS_API int mlxs_sort(mlxs_array a, int axis, int arg, mlxs_array* out) {
  TRY(*out = H(arg ? mx::argsort(A(a), axis) : mx::sort(A(a), axis)))
}
MLXS_API int mlxs_partition(mlxs_array a, int kth, int axis, int arg, mlxs_array* out) {
  TRY(*out = H(arg ? mx::argpartition(A(a), kth, axis) : mx::partition(A(a), kth, axis)))
}
MLXS_API int mlxs_topk(mlxs_array a, int k, int axis, mlxs_array* out) { TRY(*out = H(mx::topk(A(a), k, axis))) }
MLXS_API int mlxs_clip(mlxs_array a, mlxs_array lo, mlxs_array hi, mlxs_array* out) {
  TRY(*out = H(mx::clip(A(a), OA(lo), OA(hi))))
}
MLXS_API int mlxs_as_strided(mlxs_array a, const int* shape, size_t ndim, const int64_t* strides, size_t offset, mlxs_array* out) {
  TRY(*out = H(mx::as_strided(A(a), S(shape, ndim), mx::Strides(strides, strides + ndim), offset)))
}

// ---- linear algebra and convolution ----
MLXS_API int mlxs_matmul(mlxs_array a, mlxs_array b, mlxs_array* out) {
  TRY({
    auto fast = famlx::cpu_half_matmul(A(a), A(b));
    *out = H(fast ? *fast : mx::matmul(A(a), A(b)));
  })
}
MLXS_API int mlxs_addmm(mlxs_array c, mlxs_array a, mlxs_array b, float alpha, float beta, mlxs_array* out) {
  TRY(*out = H(mx::addmm(A(c), A(a), A(b), alpha, beta)))
}
MLXS_API int mlxs_conv(mlxs_array x, mlxs_array w, const int* stride, const int* padding, const int* dilation, size_t nspatial, int groups, mlxs_array* out) {
  TRY({
    switch (nspatial) {
      case 1:
        *out = H(mx::conv1d(A(x), A(w), stride[0], padding[0], dilation[0], groups));
        break;
      case 2:
        *out = H(mx::conv2d(A(x), A(w), {stride[0], stride[1]}, {padding[0], padding[1]}, {dilation[0], dilation[1]}, groups));
        break;
      case 3:
        *out = H(mx::conv3d(A(x), A(w), {stride[0], stride[1], stride[2]}, {padding[0], padding[1], padding[2]},
                            {dilation[0], dilation[1], dilation[2]}, groups));
        break;
      default:
        throw std::invalid_argument("conv: 1, 2 or 3 spatial dimensions");
    }
  })
}
MLXS_API int mlxs_conv_transpose(mlxs_array x, mlxs_array w, const int* stride, const int* padding, const int* dilation, const int* output_padding, size_t nspatial, int groups, mlxs_array* out) {
  TRY({
    switch (nspatial) {
      case 1:
        *out = H(mx::conv_transpose1d(A(x), A(w), stride[0], padding[0], dilation[0], output_padding[0], groups));
        break;
      case 2:
        *out = H(mx::conv_transpose2d(A(x), A(w), {stride[0], stride[1]}, {padding[0], padding[1]}, {dilation[0], dilation[1]},
                                      {output_padding[0], output_padding[1]}, groups));
        break;
      default:
        throw std::invalid_argument("conv_transpose: 1 or 2 spatial dimensions");
    }
  })
}
MLXS_API int mlxs_fft(int op, mlxs_array a, int n, int axis, mlxs_array* out) {
  TRY({
    auto& x = A(a);
    int ax = axis < 0 ? axis + (int)x.ndim() : axis;
    int len = n > 0 ? n : x.shape(ax);
    mx::array r = [&]() -> mx::array {
      switch (op) {
        case 0: return mx::fft::fft(x, len, axis);
        case 1: return mx::fft::ifft(x, len, axis);
        case 2: return mx::fft::rfft(x, len, axis);
        case 3: return mx::fft::irfft(x, n > 0 ? n : 2 * (x.shape(ax) - 1), axis);
      }
      throw std::invalid_argument("unknown fft op " + std::to_string(op));
    }();
    *out = H(std::move(r));
  })
}

// ---- quantization ----
MLXS_API int mlxs_quantize(mlxs_array w, int group_size, int bits, const char* mode, mlxs_array* wq, mlxs_array* scales, mlxs_array* biases) {
  TRY({
    auto r = mx::quantize(A(w), group_size, bits, std::string(mode ? mode : "affine"));
    *wq = H(r[0]);
    *scales = H(r[1]);
    *biases = r.size() > 2 ? H(r[2]) : nullptr;
  })
}
MLXS_API int mlxs_dequantize(mlxs_array w, mlxs_array scales, mlxs_array biases, int group_size, int bits, const char* mode, int dtype, mlxs_array* out) {
  TRY({
    std::optional<mx::Dtype> dt;
    if (dtype >= 0) dt = D(dtype);
    *out = H(mx::dequantize(A(w), A(scales), OA(biases), group_size, bits, std::string(mode ? mode : "affine"), std::nullopt, dt));
  })
}
MLXS_API int mlxs_quantized_matmul(mlxs_array x, mlxs_array w, mlxs_array scales, mlxs_array biases, int transpose, int group_size, int bits, const char* mode, mlxs_array* out) {
  TRY({
    std::string m(mode ? mode : "affine");
    auto fast = famlx::cpu_quantized_matmul(A(x), A(w), A(scales), OA(biases), transpose != 0, group_size, bits, m);
    *out = H(fast ? *fast : mx::quantized_matmul(A(x), A(w), A(scales), OA(biases), transpose != 0, group_size, bits, m));
  })
}
MLXS_API int mlxs_gather_mm(mlxs_array a, mlxs_array b, mlxs_array lhs, mlxs_array rhs, int sorted, mlxs_array* out) {
  TRY(*out = H(mx::gather_mm(A(a), A(b), OA(lhs), OA(rhs), sorted != 0)))
}
MLXS_API int mlxs_gather_qmm(mlxs_array x, mlxs_array w, mlxs_array scales, mlxs_array biases, mlxs_array lhs, mlxs_array rhs, int transpose, int group_size, int bits, const char* mode, int sorted, mlxs_array* out) {
  TRY(*out = H(mx::gather_qmm(A(x), A(w), A(scales), OA(biases), OA(lhs), OA(rhs), transpose != 0, group_size, bits,
                               std::string(mode ? mode : "affine"), std::nullopt, sorted != 0)))
}

// ---- fast ----
MLXS_API int mlxs_cpu_swiglu(mlxs_array gate, mlxs_array up, mlxs_array* out) {
  TRY({
    auto fast = famlx::cpu_swiglu(A(gate), A(up));
    *out = fast ? H(*fast) : nullptr;
  })
}
MLXS_API int mlxs_rms_norm(mlxs_array x, mlxs_array w, float eps, mlxs_array* out) {
  TRY({
    auto fast = famlx::cpu_rms_norm(A(x), OA(w), eps);
    *out = H(fast ? *fast : mx::fast::rms_norm(A(x), OA(w), eps));
  })
}
MLXS_API int mlxs_layer_norm(mlxs_array x, mlxs_array w, mlxs_array b, float eps, mlxs_array* out) {
  TRY(*out = H(mx::fast::layer_norm(A(x), OA(w), OA(b), eps)))
}
MLXS_API int mlxs_rope(mlxs_array x, int dims, int traditional, float base, int has_base, float scale, int offset, mlxs_array offset_arr, mlxs_array freqs, mlxs_array* out) {
  TRY({
    std::optional<float> b;
    if (has_base) b = base;
    const mx::array off = offset_arr ? A(offset_arr) : mx::array(offset, mx::int32);
    auto fast = famlx::cpu_rope(A(x), dims, traditional != 0, b, scale, off, OA(freqs));
    *out = H(fast ? *fast : mx::fast::rope(A(x), dims, traditional != 0, b, scale, off, OA(freqs)));
  })
}
MLXS_API int mlxs_sdpa(mlxs_array q, mlxs_array k, mlxs_array v, float scale, const char* mask_mode, mlxs_array mask, mlxs_array sinks, mlxs_array* out) {
  TRY({
    const std::string mode(mask_mode ? mask_mode : "");
    auto fast = famlx::cpu_attention(A(q), A(k), A(v), scale, mode, OA(mask), OA(sinks));
    *out = H(fast ? *fast : mx::fast::scaled_dot_product_attention(A(q), A(k), A(v), scale, mode, OA(mask), OA(sinks)));
  })
}
MLXS_API int mlxs_gated_delta_update(mlxs_array q, mlxs_array k, mlxs_array v, mlxs_array g, mlxs_array beta, mlxs_array state, mlxs_array mask, mlxs_array* y, mlxs_array* state_out) {
  TRY({
    auto r = mx::fast::gated_delta_update(A(q), A(k), A(v), A(g), A(beta), OA(state), OA(mask));
    *y = H(r[0]);
    *state_out = H(r[1]);
  })
}

// ---- random ----
MLXS_API int mlxs_random_seed(uint64_t seed) { TRY(mx::random::seed(seed)) }
MLXS_API int mlxs_random_key(uint64_t seed, mlxs_array* out) { TRY(*out = H(mx::random::key(seed))) }
MLXS_API int mlxs_random_split(mlxs_array key, int num, mlxs_array* out) { TRY(*out = H(mx::random::split(A(key), num))) }
MLXS_API int mlxs_random_uniform(mlxs_array lo, mlxs_array hi, const int* shape, size_t ndim, int dtype, mlxs_array key, mlxs_array* out) {
  TRY(*out = H(mx::random::uniform(A(lo), A(hi), S(shape, ndim), D(dtype), OA(key))))
}
MLXS_API int mlxs_random_normal(const int* shape, size_t ndim, int dtype, float loc, float scale, mlxs_array key, mlxs_array* out) {
  TRY(*out = H(mx::random::normal(S(shape, ndim), D(dtype), loc, scale, OA(key))))
}
MLXS_API int mlxs_random_categorical(mlxs_array logits, int axis, int num_samples, mlxs_array key, mlxs_array* out) {
  TRY(*out = H(num_samples > 0 ? mx::random::categorical(A(logits), axis, num_samples, OA(key))
                               : mx::random::categorical(A(logits), axis, OA(key))))
}
MLXS_API int mlxs_random_randint(mlxs_array lo, mlxs_array hi, const int* shape, size_t ndim, int dtype, mlxs_array key, mlxs_array* out) {
  TRY(*out = H(mx::random::randint(A(lo), A(hi), S(shape, ndim), D(dtype), OA(key))))
}
MLXS_API int mlxs_random_bernoulli(mlxs_array p, const int* shape, size_t ndim, mlxs_array key, mlxs_array* out) {
  TRY(*out = H(mx::random::bernoulli(A(p), S(shape, ndim), OA(key))))
}
MLXS_API int mlxs_random_gumbel(const int* shape, size_t ndim, int dtype, mlxs_array key, mlxs_array* out) {
  TRY(*out = H(mx::random::gumbel(S(shape, ndim), D(dtype), OA(key))))
}

// ---- io ----
MLXS_API int mlxs_load_safetensors(const char* path, mlxs_tensors* out) {
  TRY({
    auto [arrays, meta] = mx::load_safetensors(std::string(path));
    auto t = std::make_unique<Tensors>();
    for (auto& [k, v] : arrays) {
      t->names.push_back(k);
      t->arrays.push_back(v);
    }
    for (auto& [k, v] : meta) {
      t->meta_keys.push_back(k);
      t->meta.emplace_back(v);
    }
    *out = reinterpret_cast<mlxs_tensors>(t.release());
  })
}
MLXS_API int mlxs_load_gguf(const char* path, mlxs_tensors* out) {
  TRY({
    auto [arrays, meta] = mx::load_gguf(std::string(path));
    auto t = std::make_unique<Tensors>();
    for (auto& [k, v] : arrays) {
      t->names.push_back(k);
      t->arrays.push_back(v);
    }
    for (auto& [k, v] : meta) {
      t->meta_keys.push_back(k);
      t->meta.push_back(v);
    }
    *out = reinterpret_cast<mlxs_tensors>(t.release());
  })
}
static Tensors& T(mlxs_tensors t) { return *reinterpret_cast<Tensors*>(t); }
MLXS_API void mlxs_tensors_free(mlxs_tensors t) { delete reinterpret_cast<Tensors*>(t); }
MLXS_API size_t mlxs_tensors_len(mlxs_tensors t) { return T(t).names.size(); }
MLXS_API const char* mlxs_tensors_name(mlxs_tensors t, size_t i) { return T(t).names.at(i).c_str(); }
MLXS_API int mlxs_tensors_array(mlxs_tensors t, size_t i, mlxs_array* out) { TRY(*out = H(T(t).arrays.at(i))) }
MLXS_API size_t mlxs_tensors_meta_len(mlxs_tensors t) { return T(t).meta_keys.size(); }
MLXS_API const char* mlxs_tensors_meta_key(mlxs_tensors t, size_t i) { return T(t).meta_keys.at(i).c_str(); }
MLXS_API int mlxs_tensors_meta_kind(mlxs_tensors t, size_t i) {
  auto& m = T(t).meta.at(i);
  if (std::holds_alternative<std::string>(m)) return 0;
  if (std::holds_alternative<mx::array>(m)) return 1;
  if (std::holds_alternative<std::vector<std::string>>(m)) return 2;
  return 3;
}
MLXS_API const char* mlxs_tensors_meta_str(mlxs_tensors t, size_t i) {
  auto& m = T(t).meta.at(i);
  if (auto* s = std::get_if<std::string>(&m)) return s->c_str();
  return nullptr;
}
MLXS_API size_t mlxs_tensors_meta_strs_len(mlxs_tensors t, size_t i) {
  auto& m = T(t).meta.at(i);
  if (auto* s = std::get_if<std::vector<std::string>>(&m)) return s->size();
  return 0;
}
MLXS_API const char* mlxs_tensors_meta_strs_at(mlxs_tensors t, size_t i, size_t j) {
  auto& m = T(t).meta.at(i);
  if (auto* s = std::get_if<std::vector<std::string>>(&m)) return s->at(j).c_str();
  return nullptr;
}
MLXS_API int mlxs_tensors_meta_array(mlxs_tensors t, size_t i, mlxs_array* out) {
  TRY({
    auto& m = T(t).meta.at(i);
    auto* a = std::get_if<mx::array>(&m);
    if (!a) throw std::invalid_argument("metadata entry is not an array");
    *out = H(*a);
  })
}
MLXS_API int mlxs_save_safetensors(const char* path, const char* const* names, const mlxs_array* arrs, size_t n, const char* const* mkeys, const char* const* mvals, size_t nmeta) {
  TRY({
    std::unordered_map<std::string, mx::array> m;
    for (size_t i = 0; i < n; i++) m.insert({names[i], A(arrs[i])});
    std::unordered_map<std::string, std::string> meta;
    for (size_t i = 0; i < nmeta; i++) meta[mkeys[i]] = mvals[i];
    mx::save_safetensors(std::string(path), m, meta);
  })
}

// ---- compile ----
MLXS_API int mlxs_compile(mlxs_closure_fn f, void* ctx, void (*drop_ctx)(void*), int shapeless, mlxs_closure* out) {
  TRY({
    std::shared_ptr<void> owner(ctx, drop_ctx ? drop_ctx : [](void*) {});
    auto fn = [f, owner](const std::vector<mx::array>& in) -> std::vector<mx::array> {
      std::vector<mlxs_array> handles;
      handles.reserve(in.size());
      for (auto& a : in) handles.push_back(reinterpret_cast<mlxs_array>(const_cast<mx::array*>(&a)));
      std::vector<mlxs_array> outs(64, nullptr);
      size_t nout = 0;
      if (f(owner.get(), handles.data(), handles.size(), outs.data(), outs.size(), &nout) != 0)
        throw std::runtime_error(g_err);
      std::vector<mx::array> r;
      r.reserve(nout);
      for (size_t i = 0; i < nout; i++) {
        r.push_back(A(outs[i]));
        mlxs_array_free(outs[i]);
      }
      return r;
    };
    // The detail entry point takes an explicit cache key (as MLX's Python
    // binding does), which lets mlxs_closure_free erase the entry.
    static std::atomic<std::uintptr_t> next_id{1};
    auto c = std::make_unique<Closure>();
    c->id = next_id.fetch_add(1);
    c->fn = mx::detail::compile(fn, c->id, shapeless != 0);
    *out = reinterpret_cast<mlxs_closure>(c.release());
  })
}
MLXS_API void mlxs_closure_free(mlxs_closure c) { delete reinterpret_cast<Closure*>(c); }
MLXS_API int mlxs_closure_call(mlxs_closure c, const mlxs_array* in, size_t n, mlxs_array* outs, size_t cap, size_t* nout) {
  TRY(put_many(reinterpret_cast<Closure*>(c)->fn(VA(in, n)), outs, cap, nout))
}
MLXS_API int mlxs_set_compile_enabled(int enabled) {
  TRY(enabled ? mx::enable_compile() : mx::disable_compile())
}

// ---- devices, streams and backend ----
static mx::Device::DeviceType DT(int t) { return t == 1 ? mx::Device::gpu : mx::Device::cpu; }
MLXS_API int mlxs_default_device(int* type, int* index) {
  TRY({
    auto d = mx::default_device();
    *type = d.type == mx::Device::gpu ? 1 : 0;
    *index = d.index;
  })
}
MLXS_API int mlxs_set_default_device(int type, int index) { TRY(mx::set_default_device(mx::Device(DT(type), index))) }
MLXS_API int mlxs_device_available(int type) {
  try {
    return mx::is_available(mx::Device(DT(type), 0)) ? 1 : 0;
  } catch (...) {
    return 0;
  }
}
MLXS_API int mlxs_backend(void) {
  try {
    if (mx::metal::is_available()) return 1;
    if (mx::cu::is_available()) return 2;
  } catch (...) {
  }
  return 0;
}
MLXS_API int mlxs_new_stream(int type, int* index) { TRY(*index = mx::new_stream(mx::Device(DT(type), 0)).index) }
MLXS_API int mlxs_default_stream(int type, int* index) {
  TRY(*index = mx::default_stream(mx::Device(DT(type), 0)).index)
}
MLXS_API int mlxs_synchronize_stream(int type, int index) {
  TRY(mx::synchronize(mx::Stream(index, mx::Device(DT(type), 0))))
}
MLXS_API int mlxs_set_default_stream(int type, int index) {
  TRY(mx::set_default_stream(mx::Stream(index, mx::Device(DT(type), 0))))
}

// ---- memory ----
MLXS_API size_t mlxs_get_active_memory(void) { return mx::get_active_memory(); }
MLXS_API size_t mlxs_get_peak_memory(void) { return mx::get_peak_memory(); }
MLXS_API void mlxs_reset_peak_memory(void) { mx::reset_peak_memory(); }
MLXS_API size_t mlxs_get_cache_memory(void) { return mx::get_cache_memory(); }
MLXS_API size_t mlxs_set_memory_limit(size_t limit) { return mx::set_memory_limit(limit); }
MLXS_API size_t mlxs_get_memory_limit(void) { return mx::get_memory_limit(); }
MLXS_API size_t mlxs_set_cache_limit(size_t limit) { return mx::set_cache_limit(limit); }
MLXS_API size_t mlxs_set_wired_limit(size_t limit) {
  try {
    return mx::set_wired_limit(limit);
  } catch (...) {
    return 0;
  }
}
MLXS_API void mlxs_clear_cache(void) { mx::clear_cache(); }

// ---- custom kernels ----
MLXS_API int mlxs_kernel_new(int backend, const char* name, const char* const* inputs, size_t nin, const char* const* outputs, size_t nout, const char* source, const char* header, int ensure_row_contiguous, int shared_memory, mlxs_kernel* out) {
  TRY({
    std::vector<std::string> in(inputs, inputs + nin), outn(outputs, outputs + nout);
    auto k = std::make_unique<Kernel>();
    k->backend = backend;
    if (backend == 1)
      k->fn = mx::fast::metal_kernel(name, in, outn, source, header ? header : "", ensure_row_contiguous != 0);
    else if (backend == 2)
      k->fn = mx::fast::cuda_kernel(name, in, outn, source, header ? header : "", ensure_row_contiguous != 0, shared_memory);
    else
      throw std::invalid_argument("custom kernels need the Metal or CUDA backend");
    *out = reinterpret_cast<mlxs_kernel>(k.release());
  })
}
MLXS_API void mlxs_kernel_free(mlxs_kernel k) { delete reinterpret_cast<Kernel*>(k); }
MLXS_API int mlxs_kernel_call(mlxs_kernel k, const mlxs_array* in, size_t nin,
                              const int* out_shapes, const size_t* out_ndims, const int* out_dtypes, size_t nout,
                              const int* grid, const int* block,
                              const char* const* tnames, const int* tkinds, const int* tvals, size_t nt,
                              float init_value, int has_init, mlxs_array* outs) {
  TRY({
    std::vector<mx::Shape> shapes;
    std::vector<mx::Dtype> dtypes;
    size_t off = 0;
    for (size_t i = 0; i < nout; i++) {
      shapes.push_back(S(out_shapes + off, out_ndims[i]));
      off += out_ndims[i];
      dtypes.push_back(D(out_dtypes[i]));
    }
    std::vector<std::pair<std::string, mx::fast::TemplateArg>> targs;
    for (size_t i = 0; i < nt; i++) {
      mx::fast::TemplateArg v;
      if (tkinds[i] == 0) v = tvals[i];
      else if (tkinds[i] == 1) v = tvals[i] != 0;
      else v = D(tvals[i]);
      targs.emplace_back(tnames[i], v);
    }
    std::optional<float> init;
    if (has_init) init = init_value;
    auto r = reinterpret_cast<Kernel*>(k)->fn(VA(in, nin), shapes, dtypes, {grid[0], grid[1], grid[2]},
                                              {block[0], block[1], block[2]}, targs, init, false, {});
    for (size_t i = 0; i < r.size() && i < nout; i++) outs[i] = H(r[i]);
  })
}

// ---- distributed ----
// Ops use MLX's global group: the one the first init() made. Each plugin
// carries its own copy of this shim, so no group is kept here; MLX's
// init("any") hands every copy the group the host initialized.
#include "mlx/distributed/distributed.h"
#include "mlx/distributed/ops.h"

namespace mxd = mlx::core::distributed;

MLXS_API int mlxs_dist_is_available(const char* backend, int* out) {
  TRY(*out = backend ? mxd::is_available(std::string(backend)) : mxd::is_available())
}
MLXS_API int mlxs_dist_init(const char* backend, int strict, int* rank, int* size) {
  TRY(auto g = mxd::init(strict != 0, std::string(backend ? backend : "any")); *rank = g.rank(); *size = g.size())
}
MLXS_API int mlxs_dist_all_sum(mlxs_array x, mlxs_array* out) { TRY(*out = H(mxd::all_sum(A(x)))) }
MLXS_API int mlxs_dist_all_gather(mlxs_array x, mlxs_array* out) { TRY(*out = H(mxd::all_gather(A(x)))) }
MLXS_API int mlxs_dist_all_max(mlxs_array x, mlxs_array* out) { TRY(*out = H(mxd::all_max(A(x)))) }
MLXS_API int mlxs_dist_send(mlxs_array x, int dst, mlxs_array* out) { TRY(*out = H(mxd::send(A(x), dst))) }
MLXS_API int mlxs_dist_recv(const int* shape, size_t ndim, int dtype, int src, mlxs_array* out) {
  TRY(*out = H(mxd::recv(S(shape, ndim), D(dtype), src)))
}
