// Half-precision (float16 / bfloat16) matmul on CPU streams as an MLX
// primitive, bit-equal to MLX's CPU kernel (simd_gemm<T, float>): each
// output is the float32 sum, in order over k from zero, of exact products
// of two half-precision values, rounded to T once at the end. Because the
// products are exact, a fused multiply-add gives the same sum; the SIMD
// paths vectorize across outputs only, never across a sum.
//
// Hand-written because MLX's CPU kernel for these types is scalar (about
// 1 GMAC/s here) and no BLAS computes this sum order in half precision.
#include <algorithm>
#include <stdexcept>
#include <vector>

#include "cpu_common.h"
#include "cpu_ops.h"
#include "cpu_pool.h"
#include "cpu_qmm_kernels.h"
#include "mlx/allocator.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/ops.h"
#include "mlx/primitives.h"

#include "cpu_simd.h"

namespace mx = mlx::core;

namespace famlx {
namespace {

#if defined(__x86_64__)

// 16 values of T from p as floats (`n` < 16 reads only n, the rest zero).
template <typename T>
FAMLX_AVX512 inline __m512 load16(const T* p, int n) {
  const __mmask16 m = n >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << n) - 1);
  const __m256i h = _mm256_maskz_loadu_epi16(m, p);
  if constexpr (std::is_same_v<T, mx::float16_t>) {
    return _mm512_cvtph_ps(h);
  } else {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// W.T as 16-column blocks: cols[k][j] = W[n + j][k0 + k] for the 16 rows
// n.. (rows past `rows` are zero) and k < kn.
template <typename T>
FAMLX_AVX512 inline void load_block(const T* w, size_t ldw, int rows, int kn, __m512 r[16]) {
  for (int j = 0; j < 16; j++) r[j] = j < rows ? load16<T>(w + j * ldw, kn) : _mm512_setzero_ps();
  transpose16(r);
}

// out[m][n..n+16) for MR rows of x, W rows n.. (row-major, K contiguous).
template <typename T, int MR>
FAMLX_AVX512 void gemv_block(const float* x, int K, const T* w, size_t ldw, int rows, float* acc_out) {
  __m512 acc[MR];
  for (int m = 0; m < MR; m++) acc[m] = _mm512_setzero_ps();
  __m512 r[16];
  for (int k0 = 0; k0 < K; k0 += 16) {
    const int kn = std::min(16, K - k0);
    load_block<T>(w + k0, ldw, rows, kn, r);
    for (int k = 0; k < kn; k++) {
#pragma GCC unroll 4
      for (int m = 0; m < MR; m++) acc[m] = _mm512_fmadd_ps(_mm512_set1_ps(x[m * K + k0 + k]), r[k], acc[m]);
    }
  }
  for (int m = 0; m < MR; m++) _mm512_storeu_ps(acc_out + m * 16, acc[m]);
}

// The panel of W.T for rows n.. as [K][16] floats.
template <typename T>
FAMLX_AVX512 void pack_panel(const T* w, size_t ldw, int rows, int K, float* panel) {
  __m512 r[16];
  for (int k0 = 0; k0 < K; k0 += 16) {
    const int kn = std::min(16, K - k0);
    load_block<T>(w + k0, ldw, rows, kn, r);
    for (int k = 0; k < kn; k++) _mm512_storeu_ps(panel + (k0 + k) * 16, r[k]);
  }
}

// acc[m] = sum_k x[m][k] * panel[k] for MR rows, in k order.
template <int MR>
FAMLX_AVX512 void panel_rows(const float* x, int K, const float* panel, float* acc_out) {
  __m512 acc[MR];
#pragma GCC unroll 8
  for (int m = 0; m < MR; m++) acc[m] = _mm512_setzero_ps();
  for (int k = 0; k < K; k++) {
    const __m512 p = _mm512_loadu_ps(panel + k * 16);
#pragma GCC unroll 8
    for (int m = 0; m < MR; m++) acc[m] = _mm512_fmadd_ps(_mm512_set1_ps(x[m * K + k]), p, acc[m]);
  }
#pragma GCC unroll 8
  for (int m = 0; m < MR; m++) _mm512_storeu_ps(acc_out + m * 16, acc[m]);
}

template <typename T>
FAMLX_AVX512 void store_rows(const float* acc, int mr, int cols, T* out, size_t ldo) {
  for (int m = 0; m < mr; m++) {
    for (int j = 0; j < cols; j++) out[m * ldo + j] = static_cast<T>(acc[m * 16 + j]);
  }
}

// Columns [n0, n1) of out = x @ W.T (x: [M, K] floats, W: [N, K] in T).
template <typename T>
FAMLX_AVX512 void matmul_columns(const float* x, int M, int K, const T* w, size_t ldw, T* out, int N, int n0,
                                 int n1) {
  float acc[8 * 16];
  std::vector<float> panel;
  if (M > 3) panel.resize(static_cast<size_t>(K) * 16);
  for (int n = n0; n < n1; n += 16) {
    const int rows = std::min(16, n1 - n);
    const T* wn = w + static_cast<size_t>(n) * ldw;
    if (M <= 3) {
      switch (M) {
        case 3: gemv_block<T, 3>(x, K, wn, ldw, rows, acc); break;
        case 2: gemv_block<T, 2>(x, K, wn, ldw, rows, acc); break;
        default: gemv_block<T, 1>(x, K, wn, ldw, rows, acc); break;
      }
      store_rows<T>(acc, M, rows, out + n, N);
      continue;
    }
    pack_panel<T>(wn, ldw, rows, K, panel.data());
    for (int m = 0; m < M; m += 8) {
      const int mr = std::min(8, M - m);
      const float* xm = x + static_cast<size_t>(m) * K;
      switch (mr) {
        case 8: panel_rows<8>(xm, K, panel.data(), acc); break;
        case 7: panel_rows<7>(xm, K, panel.data(), acc); break;
        case 6: panel_rows<6>(xm, K, panel.data(), acc); break;
        case 5: panel_rows<5>(xm, K, panel.data(), acc); break;
        case 4: panel_rows<4>(xm, K, panel.data(), acc); break;
        case 3: panel_rows<3>(xm, K, panel.data(), acc); break;
        case 2: panel_rows<2>(xm, K, panel.data(), acc); break;
        default: panel_rows<1>(xm, K, panel.data(), acc); break;
      }
      store_rows<T>(acc, mr, rows, out + static_cast<size_t>(m) * N + n, N);
    }
  }
}
#endif

class CpuHalfMatmul : public mx::UnaryPrimitive {
 public:
  CpuHalfMatmul(mx::Stream s, int ndim) : mx::UnaryPrimitive(s), ndim_(ndim) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    const mx::array& a = inputs[0];
    const mx::array& w = inputs[1];
    out.set_data(mx::allocator::malloc(out.nbytes()));
    auto& enc = mx::cpu::get_command_encoder(stream());
    enc.set_input_array(a);
    enc.set_input_array(w);
    enc.set_output_array(out);
    enc.dispatch([a, w, out]() mutable {
#if defined(__x86_64__)
      const int K = a.shape(-1);
      const int M = static_cast<int>(a.size() / K);
      const int N = w.shape(0);
      std::vector<float> x(a.size());
      const bool a_rows = a.flags().row_contiguous;
      for (size_t i = 0; i < x.size(); i++) x[i] = to_float(a.data<void>(), a.dtype(), a_rows ? i : offset_of(a, i));
      // W's rows as laid out when k is contiguous (a linear layer's weight),
      // else copied row-major.
      std::vector<uint8_t> wc;
      const void* wp = w.data<void>();
      size_t ldw = static_cast<size_t>(w.strides()[0]);
      if (w.strides()[1] != 1) {
        wp = contiguous(w, wc);
        ldw = K;
      }
      const int panels = (N + 15) / 16;
      const double macs = static_cast<double>(M) * N * K;
      const int parts = macs >= (1 << 17) ? std::min(panels, cpu_threads() * 4) : 1;
      const int per = (panels + parts - 1) / parts;
      parallel_run(parts, [&](int i) {
        const int n0 = std::min(N, i * per * 16), n1 = std::min(N, (i + 1) * per * 16);
        if (a.dtype() == mx::float16) {
          matmul_columns<mx::float16_t>(x.data(), M, K, static_cast<const mx::float16_t*>(wp), ldw, out.data<mx::float16_t>(), N, n0,
                                        n1);
        } else {
          matmul_columns<mx::bfloat16_t>(x.data(), M, K, static_cast<const mx::bfloat16_t*>(wp), ldw, out.data<mx::bfloat16_t>(), N,
                                         n0, n1);
        }
      });
#endif
    });
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("famlx's CPU half-precision matmul runs on CPU streams only");
  }
  const char* name() const override {
    return "FamlxCpuHalfMatmul";
  }
  bool is_equivalent(const mx::Primitive& other) const override {
    return ndim_ == static_cast<const CpuHalfMatmul&>(other).ndim_;
  }
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override {
    auto s = inputs[0].shape();
    s.back() = inputs[1].shape(0);
    while (static_cast<int>(s.size()) < ndim_) s.insert(s.begin(), 1);
    return {s};
  }

 private:
  // The result's rank (b's leading axes of size 1 can add some).
  int ndim_;
};

}  // namespace

std::optional<mx::array> cpu_half_matmul(const mx::array& a, const mx::array& b) {
  mx::Stream s = mx::default_stream(mx::default_device());
  if (env_is("FAMLX_CPU_MATMUL", "mlx") || s.device != mx::Device::cpu || detect_isa() != Isa::Avx512) {
    return std::nullopt;
  }
  if ((a.dtype() != mx::float16 && a.dtype() != mx::bfloat16) || b.dtype() != a.dtype()) return std::nullopt;
  // x @ W.T with W [N, K] row-major (a linear layer's weight as a
  // transposed view): b is [K, N], possibly with leading axes of size 1.
  if (a.ndim() < 2 || b.ndim() < 2 || a.shape(-1) != b.shape(-2) || a.shape(-1) == 0 || b.shape(-1) == 0) {
    return std::nullopt;
  }
  for (int d = 0; d + 2 < static_cast<int>(b.ndim()); d++) {
    if (b.shape(d) != 1) return std::nullopt;
  }
  const mx::array b2 = b.ndim() == 2 ? b : mx::reshape(b, {b.shape(-2), b.shape(-1)}, s);
  // W itself, [N, K]: for a linear layer's transposed weight, a view of
  // the weight (strides are known once evaluated: eval_cpu copies any
  // other layout).
  const mx::array w = mx::transpose(b2, {1, 0}, s);
  // The result's shape as matmul broadcasts: a's rows, b's leading ones.
  mx::Shape shape = a.shape();
  shape.back() = b.shape(-1);
  while (shape.size() < b.ndim()) shape.insert(shape.begin(), 1);
  return mx::array(shape, a.dtype(), std::make_shared<CpuHalfMatmul>(s, static_cast<int>(shape.size())), {a, w});
}

}  // namespace famlx
