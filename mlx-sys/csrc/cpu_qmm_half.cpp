// The quantized matmul for float16 / bfloat16 activations on CPU streams,
// bit-equal to MLX's CPU kernel for them (_qmm_t): per output, in k order
// from zero and in the activations' type T, sum += x * (scale * q + bias),
// each product and sum rounded to T. The AVX-512 path keeps that order per
// output and vectorizes across sixteen outputs (weight rows gathered one
// word at a time), rounding to T with MLX's own rules (bfloat16: round to
// nearest even on the bits, NaN as 0x7FC0; float16: IEEE round to nearest
// even through F16C).
//
// Hand-written because MLX's kernel for these types is scalar through
// software conversions (about 0.15 GMAC/s here).
#include <algorithm>
#include <stdexcept>
#include <vector>

#include "cpu_common.h"
#include "cpu_ops.h"
#include "cpu_pool.h"
#include "cpu_qmm_kernels.h"
#include "mlx/allocator.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/primitives.h"

#include "cpu_simd.h"

namespace mx = mlx::core;

namespace famlx {
namespace {

#if defined(__x86_64__)

// v rounded to T, lane by lane, as MLX's conversion from float rounds.
template <typename T>
FAMLX_AVX512 inline __m512 round_to(__m512 v) {
  if constexpr (std::is_same_v<T, mx::float16_t>) {
    return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  } else {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF)));
    const __m512 kept = _mm512_castsi512_ps(_mm512_and_si512(r, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    return _mm512_mask_mov_ps(kept, nan, _mm512_castsi512_ps(_mm512_set1_epi32(0x7FC00000)));
  }
}

// Dequantized weights of 16 rows (lanes) for `kn` values of k from group
// data: d[k] = T(T(scale * q) + bias), the reference's first two roundings.
template <typename T>
struct RowBlock {
  __m512i idx;      // each lane's row offset, in words
  int rows;         // lanes that are real rows
  std::vector<float> s, b;  // [group][16] scales and biases as floats
};

template <typename T>
FAMLX_AVX512 void load_block(const QmmHalf& p, int n, RowBlock<T>& rb) {
  const int groups = p.K / p.gs;
  const int words = p.K * p.bits / 32;
  rb.rows = std::min(16, p.N - n);
  alignas(64) int off[16];
  for (int j = 0; j < 16; j++) off[j] = (j < rb.rows ? n + j : n) * words;
  rb.idx = _mm512_load_si512(off);
  rb.s.resize(static_cast<size_t>(groups) * 16);
  rb.b.resize(rb.s.size());
  const T* sc = static_cast<const T*>(p.scales);
  const T* bi = static_cast<const T*>(p.biases);
  for (int j = 0; j < 16; j++) {
    const int row = j < rb.rows ? n + j : n;
    for (int g = 0; g < groups; g++) {
      rb.s[g * 16 + j] = static_cast<float>(sc[static_cast<size_t>(row) * groups + g]);
      rb.b[g * 16 + j] = static_cast<float>(bi[static_cast<size_t>(row) * groups + g]);
    }
  }
}

// The 16 rows' dequantized values for every k, as a [K][16] panel.
template <typename T>
FAMLX_AVX512 void dequantize_panel(const QmmHalf& p, const RowBlock<T>& rb, float* panel) {
  const int per = 32 / p.bits;
  const int words_per_group = p.gs / per;
  const __m512i mask = _mm512_set1_epi32((1 << p.bits) - 1);
  const int groups = p.K / p.gs;
  int k = 0;
  for (int g = 0; g < groups; g++) {
    const __m512 s = _mm512_loadu_ps(rb.s.data() + g * 16), b = _mm512_loadu_ps(rb.b.data() + g * 16);
    for (int wi = 0; wi < words_per_group; wi++) {
      const __m512i at = _mm512_add_epi32(rb.idx, _mm512_set1_epi32(g * words_per_group + wi));
      const __m512i v = _mm512_i32gather_epi32(at, p.w, 4);
      for (int e = 0; e < per; e++, k++) {
        const __m512 q = _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(v, p.bits * e), mask));
        _mm512_storeu_ps(panel + k * 16, round_to<T>(_mm512_add_ps(round_to<T>(_mm512_mul_ps(s, q)), b)));
      }
    }
  }
}

template <typename T>
FAMLX_AVX512 void store16(const __m512 v, int rows, T* out) {
  alignas(64) float t[16];
  _mm512_store_ps(t, v);
  for (int j = 0; j < rows; j++) out[j] = static_cast<T>(t[j]);
}

// sum = T(sum + T(x * d)): the reference's last two roundings.
template <typename T>
FAMLX_AVX512 inline __m512 step(__m512 sum, float x, __m512 d) {
  return round_to<T>(_mm512_add_ps(sum, round_to<T>(_mm512_mul_ps(_mm512_set1_ps(x), d))));
}

// Columns [n0, n1) of every row of out (n0 a multiple of 16). Two chains
// at once (two row blocks for one row of x, else two rows of x) so their
// latencies overlap.
template <typename T>
FAMLX_AVX512 void qmm_half_columns(const QmmHalf& p, const float* x, int n0, int n1) {
  RowBlock<T> ra, rb;
  std::vector<float> pa(static_cast<size_t>(p.K) * 16), pb(pa.size());
  T* out = static_cast<T*>(p.out);
  for (int n = n0; n < n1; n += 16) {
    load_block<T>(p, n, ra);
    dequantize_panel<T>(p, ra, pa.data());
    const int rows_a = std::min(ra.rows, n1 - n);
    if (p.M == 1) {
      const bool two = n + 16 < n1;
      if (two) {
        load_block<T>(p, n + 16, rb);
        dequantize_panel<T>(p, rb, pb.data());
      }
      __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
      for (int k = 0; k < p.K; k++) {
        s0 = step<T>(s0, x[k], _mm512_loadu_ps(pa.data() + k * 16));
        if (two) s1 = step<T>(s1, x[k], _mm512_loadu_ps(pb.data() + k * 16));
      }
      store16<T>(s0, rows_a, out + n);
      if (two) {
        store16<T>(s1, std::min(rb.rows, n1 - n - 16), out + n + 16);
        n += 16;
      }
      continue;
    }
    int m = 0;
    for (; m + 2 <= p.M; m += 2) {
      const float* x0 = x + static_cast<size_t>(m) * p.K;
      const float* x1 = x0 + p.K;
      __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
      for (int k = 0; k < p.K; k++) {
        const __m512 d = _mm512_loadu_ps(pa.data() + k * 16);
        s0 = step<T>(s0, x0[k], d);
        s1 = step<T>(s1, x1[k], d);
      }
      store16<T>(s0, rows_a, out + static_cast<size_t>(m) * p.N + n);
      store16<T>(s1, rows_a, out + static_cast<size_t>(m + 1) * p.N + n);
    }
    for (; m < p.M; m++) {
      const float* x0 = x + static_cast<size_t>(m) * p.K;
      __m512 s0 = _mm512_setzero_ps();
      for (int k = 0; k < p.K; k++) s0 = step<T>(s0, x0[k], _mm512_loadu_ps(pa.data() + k * 16));
      store16<T>(s0, rows_a, out + static_cast<size_t>(m) * p.N + n);
    }
  }
}
#endif

}  // namespace

void qmm_half(const QmmHalf& p, const void* x, bool x_contiguous, const mx::array& xa) {
#if defined(__x86_64__)
  // x as floats (its values are T's, exact in float).
  std::vector<float> xf(static_cast<size_t>(p.M) * p.K);
  for (size_t i = 0; i < xf.size(); i++) xf[i] = to_float(x, p.dtype, x_contiguous ? i : offset_of(xa, i));
  const int blocks = (p.N + 15) / 16;
  const double macs = static_cast<double>(p.M) * p.N * p.K;
  const int parts = macs >= (1 << 16) ? std::min(blocks, cpu_threads() * 4) : 1;
  const int per = (blocks + parts - 1) / parts;
  parallel_run(parts, [&](int i) {
    const int n0 = std::min(p.N, i * per * 16), n1 = std::min(p.N, (i + 1) * per * 16);
    if (p.dtype == mx::float16) {
      qmm_half_columns<mx::float16_t>(p, xf.data(), n0, n1);
    } else {
      qmm_half_columns<mx::bfloat16_t>(p, xf.data(), n0, n1);
    }
  });
#else
  throw std::runtime_error("famlx's half-precision CPU quantized matmul needs x86-64 with AVX-512");
#endif
}

}  // namespace famlx
