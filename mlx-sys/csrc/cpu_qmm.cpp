// A CPU quantized matmul for MLX's affine layout (x @ dequantize(w).T), as a
// custom MLX primitive: graph building, async_eval and compile treat it like
// MLX's own QuantizedMatmul, whose CPU kernel it replaces on CPU streams.
//
// Hand-written because MLX's CPU kernel dequantizes element by element
// through generic code (about 1 GMAC/s here, far slower with float16 or
// bfloat16 operands) and no BLAS has a kernel for MLX's packing. This one
// unpacks each 4- or 8-bit group once into floats, takes per-group sums of x
// so a group costs one scale and one bias multiply, uses AVX2/FMA when the
// CPU has them (checked at run time; plain loops otherwise), and splits large
// products over two threads.
#include "cpu_qmm.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "mlx/allocator.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/primitives.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace mx = mlx::core;

namespace famlx {
namespace {

float to_float(const void* p, mx::Dtype t, size_t i) {
  switch (t) {
    case mx::float32:
      return static_cast<const float*>(p)[i];
    case mx::float16:
      return static_cast<float>(static_cast<const mx::float16_t*>(p)[i]);
    case mx::bfloat16:
      return static_cast<float>(static_cast<const mx::bfloat16_t*>(p)[i]);
    default:
      return 0.0f;
  }
}

void store(void* p, mx::Dtype t, size_t i, float v) {
  switch (t) {
    case mx::float32:
      static_cast<float*>(p)[i] = v;
      break;
    case mx::float16:
      static_cast<mx::float16_t*>(p)[i] = static_cast<mx::float16_t>(v);
      break;
    case mx::bfloat16:
      static_cast<mx::bfloat16_t*>(p)[i] = static_cast<mx::bfloat16_t>(v);
      break;
    default:
      break;
  }
}

// One group of `gs` quantized values (little-endian within each word, as
// MLX packs them) as floats.
void unpack(const uint32_t* w, int bits, int gs, float* out) {
  const int per = 32 / bits;
  const uint32_t mask = (1u << bits) - 1;
  for (int j = 0; j < gs / per; j++) {
    uint32_t v = w[j];
    for (int k = 0; k < per; k++) {
      out[j * per + k] = static_cast<float>((v >> (bits * k)) & mask);
    }
  }
}

float dot_plain(const float* a, const float* b, int n) {
  float s = 0.0f;
  for (int i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) void unpack_avx2(const uint32_t* w, int bits, int gs, float* out) {
  if (bits == 4) {
    const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    const __m256i mask = _mm256_set1_epi32(0xF);
    for (int j = 0; j < gs / 8; j++) {
      __m256i v = _mm256_set1_epi32(static_cast<int>(w[j]));
      __m256i q = _mm256_and_si256(_mm256_srlv_epi32(v, shifts), mask);
      _mm256_storeu_ps(out + 8 * j, _mm256_cvtepi32_ps(q));
    }
  } else {
    const __m256i shifts = _mm256_setr_epi32(0, 8, 16, 24, 0, 8, 16, 24);
    const __m256i mask = _mm256_set1_epi32(0xFF);
    for (int j = 0; j < gs / 8; j++) {
      __m256i v = _mm256_setr_epi32(static_cast<int>(w[2 * j]), static_cast<int>(w[2 * j]), static_cast<int>(w[2 * j]),
                                    static_cast<int>(w[2 * j]), static_cast<int>(w[2 * j + 1]),
                                    static_cast<int>(w[2 * j + 1]), static_cast<int>(w[2 * j + 1]),
                                    static_cast<int>(w[2 * j + 1]));
      __m256i q = _mm256_and_si256(_mm256_srlv_epi32(v, shifts), mask);
      _mm256_storeu_ps(out + 8 * j, _mm256_cvtepi32_ps(q));
    }
  }
}

__attribute__((target("avx2,fma"))) float dot_avx2(const float* a, const float* b, int n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  }
  __m256 acc = _mm256_add_ps(acc0, acc1);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  float r = _mm_cvtss_f32(s);
  for (; i < n; i++) r += a[i] * b[i];
  return r;
}

bool have_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}
#endif

struct Job {
  const float* x;      // [M, K] f32
  const float* xsum;   // [M, K / gs]
  const uint32_t* w;   // [N, K * bits / 32]
  const void* scales;  // [N, K / gs]
  const void* biases;  // [N, K / gs]
  mx::Dtype sdt;
  void* out;           // [M, N]
  mx::Dtype odt;
  int M, N, K, gs, bits;
};

// Output columns n0..n1 of every row.
void run_columns(const Job& j, int n0, int n1) {
  const int groups = j.K / j.gs;
  const int words = j.K * j.bits / 32;
  std::vector<float> q(j.gs);
  std::vector<float> acc(j.M);
#if defined(__x86_64__)
  const bool simd = have_avx2();
#endif
  for (int n = n0; n < n1; n++) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    const uint32_t* wn = j.w + static_cast<size_t>(n) * words;
    for (int g = 0; g < groups; g++) {
      const uint32_t* wg = wn + static_cast<size_t>(g) * j.gs * j.bits / 32;
      const size_t si = static_cast<size_t>(n) * groups + g;
      const float s = to_float(j.scales, j.sdt, si);
      const float b = to_float(j.biases, j.sdt, si);
#if defined(__x86_64__)
      if (simd) {
        unpack_avx2(wg, j.bits, j.gs, q.data());
        for (int m = 0; m < j.M; m++) {
          const float d = dot_avx2(q.data(), j.x + static_cast<size_t>(m) * j.K + g * j.gs, j.gs);
          acc[m] += s * d + b * j.xsum[static_cast<size_t>(m) * groups + g];
        }
        continue;
      }
#endif
      unpack(wg, j.bits, j.gs, q.data());
      for (int m = 0; m < j.M; m++) {
        const float d = dot_plain(q.data(), j.x + static_cast<size_t>(m) * j.K + g * j.gs, j.gs);
        acc[m] += s * d + b * j.xsum[static_cast<size_t>(m) * groups + g];
      }
    }
    for (int m = 0; m < j.M; m++) store(j.out, j.odt, static_cast<size_t>(m) * j.N + n, acc[m]);
  }
}

// The element offset of linear index i of `a` (for inputs that are not
// row-contiguous).
size_t offset_of(const mx::array& a, size_t i) {
  size_t off = 0;
  for (int d = static_cast<int>(a.ndim()) - 1; d >= 0; d--) {
    const size_t dim = static_cast<size_t>(a.shape(d));
    off += (i % dim) * static_cast<size_t>(a.strides()[d]);
    i /= dim;
  }
  return off;
}

class CpuQuantizedMatmul : public mx::UnaryPrimitive {
 public:
  CpuQuantizedMatmul(mx::Stream s, int group_size, int bits)
      : mx::UnaryPrimitive(s), group_size_(group_size), bits_(bits) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    const mx::array& x = inputs[0];
    const mx::array& w = inputs[1];
    const mx::array& scales = inputs[2];
    const mx::array& biases = inputs[3];
    out.set_data(mx::allocator::malloc(out.nbytes()));
    auto& enc = mx::cpu::get_command_encoder(stream());
    enc.set_input_array(x);
    enc.set_input_array(w);
    enc.set_input_array(scales);
    enc.set_input_array(biases);
    enc.set_output_array(out);
    const int gs = group_size_, bits = bits_;
    enc.dispatch([x, w, scales, biases, out, gs, bits]() mutable {
      const int K = x.shape(-1);
      const int M = static_cast<int>(x.size() / K);
      const int N = w.shape(0);
      const int groups = K / gs;
      // x as float32 rows, and each group's sum.
      std::vector<float> xf(static_cast<size_t>(M) * K);
      const bool contiguous = x.flags().row_contiguous;
      for (size_t i = 0; i < xf.size(); i++) {
        xf[i] = to_float(x.data<void>(), x.dtype(), contiguous ? i : offset_of(x, i));
      }
      std::vector<float> xsum(static_cast<size_t>(M) * groups);
      for (int m = 0; m < M; m++) {
        for (int g = 0; g < groups; g++) {
          float s = 0.0f;
          for (int k = 0; k < gs; k++) s += xf[static_cast<size_t>(m) * K + g * gs + k];
          xsum[static_cast<size_t>(m) * groups + g] = s;
        }
      }
      // Weights are row-contiguous as loaded; any other layout is copied.
      std::vector<uint32_t> wc;
      std::vector<float> sc, bc;
      const uint32_t* wp = w.data<uint32_t>();
      const void *sp = scales.data<void>(), *bp = biases.data<void>();
      mx::Dtype sdt = scales.dtype();
      if (!w.flags().row_contiguous) {
        wc.resize(w.size());
        for (size_t i = 0; i < wc.size(); i++) wc[i] = w.data<uint32_t>()[offset_of(w, i)];
        wp = wc.data();
      }
      if (!scales.flags().row_contiguous || !biases.flags().row_contiguous) {
        sc.resize(scales.size());
        bc.resize(biases.size());
        for (size_t i = 0; i < sc.size(); i++) {
          sc[i] = to_float(scales.data<void>(), sdt, offset_of(scales, i));
          bc[i] = to_float(biases.data<void>(), sdt, offset_of(biases, i));
        }
        sp = sc.data();
        bp = bc.data();
        sdt = mx::float32;
      }
      Job j{xf.data(), xsum.data(), wp, sp, bp, sdt, out.data<void>(), out.dtype(), M, N, K, gs, bits};
      // Two threads when the product is worth a thread's start.
      const double macs = static_cast<double>(M) * N * K;
      const int threads = macs >= 4e6 ? 2 : 1;
      if (threads == 1) {
        run_columns(j, 0, N);
      } else {
        const int half = (N / 2 + 7) / 8 * 8;
        std::thread t([&j, half, N] { run_columns(j, half, N); });
        run_columns(j, 0, std::min(half, N));
        t.join();
      }
    });
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("famlx's CPU quantized matmul runs on CPU streams only");
  }

  const char* name() const override {
    return "FamlxCpuQuantizedMatmul";
  }

  bool is_equivalent(const mx::Primitive& other) const override {
    auto& o = static_cast<const CpuQuantizedMatmul&>(other);
    return group_size_ == o.group_size_ && bits_ == o.bits_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override {
    auto s = inputs[0].shape();
    s.back() = inputs[1].shape(0);
    return {s};
  }

 private:
  int group_size_;
  int bits_;
};

bool is_float(mx::Dtype t) {
  return t == mx::float32 || t == mx::float16 || t == mx::bfloat16;
}

}  // namespace

std::optional<mx::array> cpu_quantized_matmul(const mx::array& x, const mx::array& w, const mx::array& scales,
                                              const std::optional<mx::array>& biases, bool transpose, int group_size,
                                              int bits, const std::string& mode) {
  static const bool off = [] {
    const char* v = std::getenv("FAMLX_CPU_QMM");
    return v && std::string(v) == "mlx";
  }();
  mx::Stream s = mx::default_stream(mx::default_device());
  if (off || s.device != mx::Device::cpu || !transpose || mode != "affine" || !biases) return std::nullopt;
  if (!(bits == 4 || bits == 8) || group_size % 8 != 0 || x.ndim() < 1 || w.ndim() != 2) return std::nullopt;
  const int K = x.shape(-1);
  if (K == 0 || K % group_size != 0 || w.shape(1) * 32 / bits != K) return std::nullopt;
  if (scales.shape() != biases->shape() || scales.ndim() != 2 || scales.shape(0) != w.shape(0) ||
      scales.shape(1) != K / group_size)
    return std::nullopt;
  // float32 activations only: with float16/bfloat16 ones MLX's kernel
  // accumulates in that type, and checkpoints run that way are compared
  // against references that did so (a float32 sum is not their result).
  if (x.dtype() != mx::float32 || !is_float(scales.dtype()) || biases->dtype() != scales.dtype() ||
      w.dtype() != mx::uint32)
    return std::nullopt;
  auto shape = x.shape();
  shape.back() = w.shape(0);
  // The result's dtype as MLX's op gives it.
  mx::Dtype out = mx::promote_types(x.dtype(), scales.dtype());
  return mx::array(shape, out, std::make_shared<CpuQuantizedMatmul>(s, group_size, bits),
                   {x, w, scales, *biases});
}


namespace {

// RMS norm over the last axis, as MLX's CPU fallback computes it (float32
// mean of squares, rsqrt, the cast to the output type, then the weight in
// that type) but as one node instead of eight.
class CpuRmsNorm : public mx::UnaryPrimitive {
 public:
  CpuRmsNorm(mx::Stream s, float eps, bool weighted) : mx::UnaryPrimitive(s), eps_(eps), weighted_(weighted) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    const mx::array& x = inputs[0];
    std::optional<mx::array> w;
    if (weighted_) w = inputs[1];
    out.set_data(mx::allocator::malloc(out.nbytes()));
    auto& enc = mx::cpu::get_command_encoder(stream());
    for (auto& a : inputs) enc.set_input_array(a);
    enc.set_output_array(out);
    const float eps = eps_;
    enc.dispatch([x, w, out, eps]() mutable {
      const int D = x.shape(-1);
      const size_t rows = x.size() / D;
      const bool xc = x.flags().row_contiguous;
      const bool wc = !w || w->flags().row_contiguous;
      std::vector<float> row(D);
      for (size_t r = 0; r < rows; r++) {
        float ss = 0.0f;
        for (int i = 0; i < D; i++) {
          const size_t li = r * D + i;
          row[i] = to_float(x.data<void>(), x.dtype(), xc ? li : offset_of(x, li));
          ss += row[i] * row[i];
        }
        // mean as MLX takes it: the sum times 1/D (rounded to float32).
        const float inv = 1.0f / std::sqrt(ss * static_cast<float>(1.0 / D) + eps);
        for (int i = 0; i < D; i++) {
          // Rounded to the output type before the weight, as the fallback.
          float y = row[i] * inv;
          const size_t li = r * D + i;
          store(out.data<void>(), out.dtype(), li, y);
          if (w) {
            const float v = to_float(out.data<void>(), out.dtype(), li);
            const float wv = to_float(w->data<void>(), w->dtype(), wc ? i : offset_of(*w, i));
            store(out.data<void>(), out.dtype(), li, v * wv);
          }
        }
      }
    });
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("famlx's CPU RMS norm runs on CPU streams only");
  }

  const char* name() const override {
    return "FamlxCpuRmsNorm";
  }

  bool is_equivalent(const mx::Primitive& other) const override {
    auto& o = static_cast<const CpuRmsNorm&>(other);
    return eps_ == o.eps_ && weighted_ == o.weighted_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override {
    return {inputs[0].shape()};
  }

 private:
  float eps_;
  bool weighted_;
};

}  // namespace

std::optional<mx::array> cpu_rms_norm(const mx::array& x, const std::optional<mx::array>& w, float eps) {
  static const bool off = [] {
    const char* v = std::getenv("FAMLX_CPU_NORM");
    return v && std::string(v) == "mlx";
  }();
  mx::Stream s = mx::default_stream(mx::default_device());
  if (off || s.device != mx::Device::cpu || x.ndim() < 1 || !is_float(x.dtype())) return std::nullopt;
  if (w && (w->ndim() != 1 || w->shape(0) != x.shape(-1) || !is_float(w->dtype()))) return std::nullopt;
  mx::Dtype out = w ? mx::promote_types(x.dtype(), w->dtype()) : x.dtype();
  std::vector<mx::array> in{x};
  if (w) in.push_back(*w);
  return mx::array(x.shape(), out, std::make_shared<CpuRmsNorm>(s, eps, w.has_value()), in);
}

}  // namespace famlx
