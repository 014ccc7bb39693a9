// Hand-written because no BLAS has kernels for MLX's quantized packing, and
// MLX's CPU kernel dequantizes element by element through generic code.
// x86-64 gets AVX2/FMA paths picked at run time; every CPU has the plain
// loops, which compute the same sums in the same order per group.
#include "cpu_qmm_kernels.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cpu_common.h"

#include "cpu_simd.h"

namespace mx = mlx::core;

namespace famlx {

// The SIMD level a product runs at: the best the CPU has, or lower when
// FAMLX_CPU_ISA (plain, avx2) asks for it (tests use it to cover each path).
Isa detect_isa() {
#if defined(__x86_64__)
  static const Isa best = [] {
    if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))) {
      return Isa::Plain;
    }
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
      return Isa::Avx512;
    }
    return Isa::Avx2;
  }();
  Isa want = best;
  if (const char* v = std::getenv("FAMLX_CPU_ISA")) {
    const std::string s(v);
    if (s == "plain") want = Isa::Plain;
    if (s == "avx2") want = Isa::Avx2;
  }
  return std::min(best, want);
#else
  return Isa::Plain;
#endif
}

namespace {

// n values of a scale or bias row from element `off` as float32.
void load_row(const void* p, mx::Dtype t, size_t off, int n, float* dst) {
  if (t == mx::float32) {
    std::memcpy(dst, static_cast<const float*>(p) + off, sizeof(float) * n);
    return;
  }
  for (int i = 0; i < n; i++) dst[i] = to_float(p, t, off + i);
}

// Quantized value k of a weight row: a little-endian bit stream, so a
// 5-bit value may straddle two words (a group of 32 is 5 whole words).
inline uint32_t qval(const uint32_t* row, int bits, int k) {
  const size_t bit = static_cast<size_t>(k) * bits;
  const int at = static_cast<int>(bit % 32);
  uint32_t v = row[bit / 32] >> at;
  if (32 - at < bits) v |= row[bit / 32 + 1] << (32 - at);
  return v & ((1u << bits) - 1);
}

// ---- one weight row at a time --------------------------------------------

// sum_k q[k] x[k] over one group, plain loops.
float group_dot_plain(const uint32_t* wg, int bits, int gs, const float* x) {
  float s = 0.0f;
  for (int k = 0; k < gs; k++) s += static_cast<float>(qval(wg, bits, k)) * x[k];
  return s;
}

#if defined(__x86_64__)
// Scale or bias i as float32 (float16 through the F16C instruction).
__attribute__((target("avx2,fma,f16c"))) inline float scale_at(const void* p, mx::Dtype t, size_t i) {
  if (t == mx::float32) return static_cast<const float*>(p)[i];
  const uint16_t h = static_cast<const uint16_t*>(p)[i];
  if (t == mx::float16) return _cvtsh_ss(h);
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

__attribute__((target("avx2,fma"))) inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// One output of a 4-bit row: x laid out as permute_x4 lays it for AVX2.
// Each 32-value block (four words) is broadcast to both halves of a
// register and shifted so that lane l < 4 holds word l's value 2i and lane
// l >= 4 its value 2i + 1.
__attribute__((target("avx2,fma,f16c"))) float row_q4_avx2(const uint32_t* w, const float* xp, const float* xsum,
                                                            const QmmProblem& p, size_t off) {
  const __m256i mask = _mm256_set1_epi32(0xF);
  const __m256i sh0 = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4);
  const __m256i sh1 = _mm256_setr_epi32(8, 8, 8, 8, 12, 12, 12, 12);
  const __m256i sh2 = _mm256_setr_epi32(16, 16, 16, 16, 20, 20, 20, 20);
  const __m256i sh3 = _mm256_setr_epi32(24, 24, 24, 24, 28, 28, 28, 28);
  __m256 acc = _mm256_setzero_ps();
  float bias = 0.0f;
  const int groups = p.K / p.gs, blocks = p.gs / 32;
  for (int g = 0; g < groups; g++) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (int b = 0; b < blocks; b++) {
      const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w)));
      const __m256 q0 = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(v, sh0), mask));
      const __m256 q1 = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(v, sh1), mask));
      const __m256 q2 = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(v, sh2), mask));
      const __m256 q3 = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(v, sh3), mask));
      a0 = _mm256_fmadd_ps(q0, _mm256_loadu_ps(xp), a0);
      a1 = _mm256_fmadd_ps(q1, _mm256_loadu_ps(xp + 8), a1);
      a0 = _mm256_fmadd_ps(q2, _mm256_loadu_ps(xp + 16), a0);
      a1 = _mm256_fmadd_ps(q3, _mm256_loadu_ps(xp + 24), a1);
      w += 4;
      xp += 32;
    }
    acc = _mm256_fmadd_ps(_mm256_add_ps(a0, a1), _mm256_set1_ps(scale_at(p.scales, p.scale_dtype, off + g)), acc);
    bias += scale_at(p.biases, p.scale_dtype, off + g) * xsum[g];
  }
  return hsum(acc) + bias;
}

__attribute__((target("avx2,fma,f16c"))) float row_q8_avx2(const uint32_t* w, const float* x, const float* xsum,
                                                            const QmmProblem& p, size_t off) {
  const uint8_t* q = reinterpret_cast<const uint8_t*>(w);
  __m256 acc = _mm256_setzero_ps();
  float bias = 0.0f;
  const int groups = p.K / p.gs;
  for (int g = 0; g < groups; g++) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int k = 0;
    for (; k + 16 <= p.gs; k += 16) {
      const __m256 q0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q))));
      const __m256 q1 =
          _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + 8))));
      a0 = _mm256_fmadd_ps(q0, _mm256_loadu_ps(x), a0);
      a1 = _mm256_fmadd_ps(q1, _mm256_loadu_ps(x + 8), a1);
      q += 16;
      x += 16;
    }
    for (; k < p.gs; k += 8) {
      const __m256 q0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q))));
      a0 = _mm256_fmadd_ps(q0, _mm256_loadu_ps(x), a0);
      q += 8;
      x += 8;
    }
    acc = _mm256_fmadd_ps(_mm256_add_ps(a0, a1), _mm256_set1_ps(scale_at(p.scales, p.scale_dtype, off + g)), acc);
    bias += scale_at(p.biases, p.scale_dtype, off + g) * xsum[g];
  }
  return hsum(acc) + bias;
}

// One output of a 5-bit row (GGUF's Q5_0/Q5_1/Q5_K). A group's 32 values
// are 20 bytes: two 16-byte loads (at 0 and 4, never past the group) go to
// both halves of a register; pshufb puts the two bytes holding each value
// in a 16-bit lane, a multiply by 2^(11 - shift) moves the value to the top
// five bits and a shift by 11 brings it down; then they are summed as the
// 8-bit rows are.
__attribute__((target("avx2,fma,f16c"))) float row_q5_avx2(const uint32_t* w, const float* x, const float* xsum,
                                                            const QmmProblem& p, size_t off) {
  const uint8_t* q = reinterpret_cast<const uint8_t*>(w);
  // Value i (0..15) starts at bit 5i: bytes 5i/8 and the next, from the
  // load at byte 0; value 16 + i the same bytes plus 10, from the load at 4.
  const __m256i pick_lo = _mm256_setr_epi8(0, 1, 0, 1, 1, 2, 1, 2, 2, 3, 3, 4, 3, 4, 4, 5,  //
                                           5, 6, 5, 6, 6, 7, 6, 7, 7, 8, 8, 9, 8, 9, 9, 10);
  const __m256i pick_hi = _mm256_setr_epi8(6, 7, 6, 7, 7, 8, 7, 8, 8, 9, 9, 10, 9, 10, 10, 11,  //
                                           11, 12, 11, 12, 12, 13, 12, 13, 13, 14, 14, 15, 14, 15, 15, -1);
  // 2^(11 - 5i % 8) for i = 0..15.
  const __m256i mult = _mm256_setr_epi16(1 << 11, 1 << 6, 1 << 9, 1 << 4, 1 << 7, 1 << 10, 1 << 5, 1 << 8,  //
                                         1 << 11, 1 << 6, 1 << 9, 1 << 4, 1 << 7, 1 << 10, 1 << 5, 1 << 8);
  __m256 acc = _mm256_setzero_ps();
  float bias = 0.0f;
  const int groups = p.K / p.gs;
  for (int g = 0; g < groups; g++) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (int k = 0; k < p.gs; k += 32) {
      const __m256i b0 = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
      const __m256i b1 = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 4)));
      const __m256i v0 = _mm256_srli_epi16(_mm256_mullo_epi16(_mm256_shuffle_epi8(b0, pick_lo), mult), 11);
      const __m256i v1 = _mm256_srli_epi16(_mm256_mullo_epi16(_mm256_shuffle_epi8(b1, pick_hi), mult), 11);
      const __m256 q0 = _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(v0)));
      const __m256 q1 = _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(v0, 1)));
      const __m256 q2 = _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(v1)));
      const __m256 q3 = _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(v1, 1)));
      a0 = _mm256_fmadd_ps(q0, _mm256_loadu_ps(x), a0);
      a1 = _mm256_fmadd_ps(q1, _mm256_loadu_ps(x + 8), a1);
      a0 = _mm256_fmadd_ps(q2, _mm256_loadu_ps(x + 16), a0);
      a1 = _mm256_fmadd_ps(q3, _mm256_loadu_ps(x + 24), a1);
      q += 20;
      x += 32;
    }
    acc = _mm256_fmadd_ps(_mm256_add_ps(a0, a1), _mm256_set1_ps(scale_at(p.scales, p.scale_dtype, off + g)), acc);
    bias += scale_at(p.biases, p.scale_dtype, off + g) * xsum[g];
  }
  return hsum(acc) + bias;
}


// n scale or bias values from element `off` as float32 (float16 through
// vcvtph2ps, sixteen at a time); dst holds n rounded up to 16.
FAMLX_AVX512 void scales_avx512(const void* p, mx::Dtype t, size_t off, int n, float* dst) {
  if (t != mx::float16) {
    for (int i = 0; i < n; i++) dst[i] = scale_at(p, t, off + i);
    return;
  }
  const uint16_t* h = static_cast<const uint16_t*>(p) + off;
  for (int i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (n - i)) - 1);
    // A full store (dst has room to a multiple of 16): the kernels'
    // scalar loads forward from it, where a masked store would stall them.
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, h + i)));
  }
}

// R outputs of 4-bit rows (R rows interleaved, so their dependency chains
// overlap) with x laid out as permute_x4 lays it for AVX-512: a block's four
// words go to all four 128-bit lanes, shifted so that lane l holds value
// 4i + l / 4 of word l % 4; vpermps, which reads only an index's low four
// bits, looks each up in a 16-entry table of the group's dequantized values
// (scale * q + bias).
template <int R>
FAMLX_AVX512 void rows_q4_avx512(const uint32_t* w, size_t words, const float* xp, const float* s, const float* b,
                                 int stride, int groups, int gs, float* out) {
  const __m512i sh0 = _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12);
  const __m512i sh1 = _mm512_add_epi32(sh0, _mm512_set1_epi32(16));
  const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512 acc0[R], acc1[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; r++) acc0[r] = acc1[r] = _mm512_setzero_ps();
  const int blocks = gs / 32;
  for (int g = 0; g < groups; g++) {
    __m512 table[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
      table[r] = _mm512_fmadd_ps(iota, _mm512_set1_ps(s[r * stride + g]), _mm512_set1_ps(b[r * stride + g]));
    }
    for (int blk = 0; blk < blocks; blk++) {
      const __m512 x0 = _mm512_loadu_ps(xp), x1 = _mm512_loadu_ps(xp + 16);
      const size_t at = static_cast<size_t>(g * blocks + blk) * 4;
#pragma GCC unroll 4
      for (int r = 0; r < R; r++) {
        const __m512i v = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + r * words + at)));
        acc0[r] = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srlv_epi32(v, sh0), table[r]), x0, acc0[r]);
        acc1[r] = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srlv_epi32(v, sh1), table[r]), x1, acc1[r]);
      }
      xp += 32;
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; r++) out[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[r], acc1[r]));
}

// R outputs of 8-bit rows: sum_g scale_g * (q_g . x_g) + bias . xsum.
template <int R>
FAMLX_AVX512 void rows_q8_avx512(const uint32_t* w, size_t words, const float* x, const float* xsum, const float* s,
                                 const float* b, int stride, int groups, int gs, float* out) {
  __m512 acc[R];
  float bias[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; r++) {
    acc[r] = _mm512_setzero_ps();
    bias[r] = 0.0f;
    for (int g = 0; g < groups; g++) bias[r] += b[r * stride + g] * xsum[g];
  }
  for (int g = 0; g < groups; g++) {
    __m512 a0[R], a1[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) a0[r] = a1[r] = _mm512_setzero_ps();
    for (int k = 0; k < gs; k += 32) {
      const __m512 x0 = _mm512_loadu_ps(x + g * gs + k), x1 = _mm512_loadu_ps(x + g * gs + k + 16);
#pragma GCC unroll 4
      for (int r = 0; r < R; r++) {
        const uint8_t* q = reinterpret_cast<const uint8_t*>(w + r * words) + g * gs + k;
        const __m512 q0 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q))));
        const __m512 q1 =
            _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16))));
        a0[r] = _mm512_fmadd_ps(q0, x0, a0[r]);
        a1[r] = _mm512_fmadd_ps(q1, x1, a1[r]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
      acc[r] = _mm512_fmadd_ps(_mm512_add_ps(a0[r], a1[r]), _mm512_set1_ps(s[r * stride + g]), acc[r]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; r++) out[r] = _mm512_reduce_add_ps(acc[r]) + bias[r];
}

// Output columns [n0, n1) of every row, four weight rows at a time.
FAMLX_AVX512 void qmm_rows_avx512(const QmmProblem& p, const QmmRowsInput& in, int n0, int n1) {
  const int groups = p.K / p.gs;
  const size_t words = static_cast<size_t>(p.K) * p.bits / 32;
  // The four rows' scales and biases (adjacent in memory) as float32.
  const int stride = groups;
  thread_local std::vector<float> s, b;
  s.resize(static_cast<size_t>(4) * groups + 16);
  b.resize(s.size());
  float out[4];
  for (int n = n0; n < n1; n += 4) {
    const int R = std::min(4, n1 - n);
    scales_avx512(p.scales, p.scale_dtype, static_cast<size_t>(n) * groups, R * groups, s.data());
    scales_avx512(p.biases, p.scale_dtype, static_cast<size_t>(n) * groups, R * groups, b.data());
    const uint32_t* wn = p.w + n * words;
    for (int m = 0; m < p.M; m++) {
      const float* xm = p.x + static_cast<size_t>(m) * p.K;
      const float* xsum = in.xsum.data() + static_cast<size_t>(m) * groups;
      const float* xpm = in.xp.empty() ? nullptr : in.xp.data() + static_cast<size_t>(m) * p.K;
      if (p.bits == 4) {
        switch (R) {
          case 4: rows_q4_avx512<4>(wn, words, xpm, s.data(), b.data(), stride, groups, p.gs, out); break;
          case 3: rows_q4_avx512<3>(wn, words, xpm, s.data(), b.data(), stride, groups, p.gs, out); break;
          case 2: rows_q4_avx512<2>(wn, words, xpm, s.data(), b.data(), stride, groups, p.gs, out); break;
          default: rows_q4_avx512<1>(wn, words, xpm, s.data(), b.data(), stride, groups, p.gs, out); break;
        }
      } else {
        switch (R) {
          case 4: rows_q8_avx512<4>(wn, words, xm, xsum, s.data(), b.data(), stride, groups, p.gs, out); break;
          case 3: rows_q8_avx512<3>(wn, words, xm, xsum, s.data(), b.data(), stride, groups, p.gs, out); break;
          case 2: rows_q8_avx512<2>(wn, words, xm, xsum, s.data(), b.data(), stride, groups, p.gs, out); break;
          default: rows_q8_avx512<1>(wn, words, xm, xsum, s.data(), b.data(), stride, groups, p.gs, out); break;
        }
      }
      for (int r = 0; r < R; r++) p.out[static_cast<size_t>(m) * p.N + n + r] = out[r];
    }
  }
}
#endif

// x reordered for the 4-bit SIMD row kernels (see there), block by block.
void permute_x4(const float* x, int K, Isa isa, float* xp) {
  for (int b = 0; b < K / 32; b++) {
    const float* xb = x + b * 32;
    float* pb = xp + b * 32;
    if (isa == Isa::Avx512) {
      for (int i = 0; i < 2; i++) {
        for (int l = 0; l < 16; l++) pb[i * 16 + l] = xb[8 * (l % 4) + 4 * i + l / 4];
      }
    } else {
      for (int i = 0; i < 4; i++) {
        for (int l = 0; l < 8; l++) pb[i * 8 + l] = xb[8 * (l % 4) + 2 * i + l / 4];
      }
    }
  }
}

}  // namespace

QmmRowsInput::QmmRowsInput(const QmmProblem& p) : isa(detect_isa()) {
  // The SIMD kernels step through whole 32-value blocks.
  if (p.gs % 32 != 0) isa = Isa::Plain;
  const int groups = p.K / p.gs;
  xsum.resize(static_cast<size_t>(p.M) * groups);
  for (int m = 0; m < p.M; m++) {
    const float* xm = p.x + static_cast<size_t>(m) * p.K;
    for (int g = 0; g < groups; g++) {
      float s = 0.0f;
      for (int k = 0; k < p.gs; k++) s += xm[g * p.gs + k];
      xsum[static_cast<size_t>(m) * groups + g] = s;
    }
  }
  if (isa != Isa::Plain && p.bits == 4) {
    xp.resize(static_cast<size_t>(p.M) * p.K);
    for (int m = 0; m < p.M; m++) permute_x4(p.x + static_cast<size_t>(m) * p.K, p.K, isa, xp.data() + m * p.K);
  }
}

void qmm_rows(const QmmProblem& p, const QmmRowsInput& in, int n0, int n1) {
  const int groups = p.K / p.gs;
  const size_t words = static_cast<size_t>(p.K) * p.bits / 32;
  std::vector<float> s, b;
  if (in.isa == Isa::Plain) {
    s.resize(groups);
    b.resize(groups);
  }
#if defined(__x86_64__)
  // 5-bit rows take the AVX2 kernel on AVX-512 machines too.
  if (in.isa == Isa::Avx512 && p.bits != 5) return qmm_rows_avx512(p, in, n0, n1);
#endif
  for (int n = n0; n < n1; n++) {
    const uint32_t* wn = p.w + n * words;
    const size_t off = static_cast<size_t>(n) * groups;
    if (in.isa == Isa::Plain) {
      load_row(p.scales, p.scale_dtype, off, groups, s.data());
      load_row(p.biases, p.scale_dtype, off, groups, b.data());
    }
    for (int m = 0; m < p.M; m++) {
      const float* xm = p.x + static_cast<size_t>(m) * p.K;
      const float* xsum = in.xsum.data() + static_cast<size_t>(m) * groups;
      const float* xpm = in.xp.empty() ? nullptr : in.xp.data() + static_cast<size_t>(m) * p.K;
      float r = 0.0f;
      switch (in.isa) {
#if defined(__x86_64__)
        case Isa::Avx512:
        case Isa::Avx2:
          r = p.bits == 4   ? row_q4_avx2(wn, xpm, xsum, p, off)
              : p.bits == 5 ? row_q5_avx2(wn, xm, xsum, p, off)
                            : row_q8_avx2(wn, xm, xsum, p, off);
          break;
#endif
        default: {
          float dot = 0.0f, bias = 0.0f;
          for (int g = 0; g < groups; g++) {
            dot += s[g] * group_dot_plain(wn + g * p.gs * p.bits / 32, p.bits, p.gs, xm + g * p.gs);
            bias += b[g] * xsum[g];
          }
          r = dot + bias;
        }
      }
      p.out[static_cast<size_t>(m) * p.N + n] = r;
    }
  }
}

// ---- dequantized panels ---------------------------------------------------

namespace {

// Columns [n, n + kPanel) of W.T, dequantized: panel[k * kPanel + j] =
// W[n + j, k] (zero past N).
void pack_panel(const QmmProblem& p, int n, float* panel, float* s, float* b) {
  const int groups = p.K / p.gs;
  const size_t words = static_cast<size_t>(p.K) * p.bits / 32;
  for (int j = 0; j < kPanel; j++) {
    if (n + j >= p.N) {
      for (int k = 0; k < p.K; k++) panel[k * kPanel + j] = 0.0f;
      continue;
    }
    const uint32_t* row = p.w + (n + j) * words;
    load_row(p.scales, p.scale_dtype, static_cast<size_t>(n + j) * groups, groups, s);
    load_row(p.biases, p.scale_dtype, static_cast<size_t>(n + j) * groups, groups, b);
    if (32 % p.bits != 0) {
      for (int k = 0; k < p.K; k++) panel[k * kPanel + j] = s[k / p.gs] * static_cast<float>(qval(row, p.bits, k)) + b[k / p.gs];
      continue;
    }
    const int per = 32 / p.bits;
    const uint32_t mask = (1u << p.bits) - 1;
    for (int wi = 0; wi < p.K / per; wi++) {
      const uint32_t v = row[wi];
      const int g = wi * per / p.gs;
      for (int e = 0; e < per; e++) {
        const int k = wi * per + e;
        panel[k * kPanel + j] = s[g] * static_cast<float>((v >> (p.bits * e)) & mask) + b[g];
      }
    }
  }
}

// c[r, 0..cols) (+)= a[r, 0..kc) @ panel rows, for MR rows of a.
template <int MR>
void micro_plain(const float* a, size_t lda, const float* panel, int kc, float* c, size_t ldc, int cols, bool add) {
  float acc[MR][kPanel] = {};
  for (int k = 0; k < kc; k++) {
    for (int r = 0; r < MR; r++) {
      const float av = a[r * lda + k];
      for (int j = 0; j < kPanel; j++) acc[r][j] += av * panel[k * kPanel + j];
    }
  }
  for (int r = 0; r < MR; r++) {
    for (int j = 0; j < cols; j++) c[r * ldc + j] = (add ? c[r * ldc + j] : 0.0f) + acc[r][j];
  }
}

#if defined(__x86_64__)
template <int MR>
__attribute__((target("avx2,fma"))) void micro_avx2(const float* a, size_t lda, const float* panel, int kc, float* c,
                                                     size_t ldc, int cols, bool add) {
  __m256 acc[MR][2];
#pragma GCC unroll 8
  for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int k = 0; k < kc; k++) {
    const __m256 b0 = _mm256_loadu_ps(panel + k * kPanel);
    const __m256 b1 = _mm256_loadu_ps(panel + k * kPanel + 8);
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) {
      const __m256 av = _mm256_broadcast_ss(a + r * lda + k);
      acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; r++) {
    float* cr = c + r * ldc;
    if (cols == kPanel) {
      if (add) {
        acc[r][0] = _mm256_add_ps(acc[r][0], _mm256_loadu_ps(cr));
        acc[r][1] = _mm256_add_ps(acc[r][1], _mm256_loadu_ps(cr + 8));
      }
      _mm256_storeu_ps(cr, acc[r][0]);
      _mm256_storeu_ps(cr + 8, acc[r][1]);
    } else {
      float t[kPanel];
      _mm256_storeu_ps(t, acc[r][0]);
      _mm256_storeu_ps(t + 8, acc[r][1]);
      for (int j = 0; j < cols; j++) cr[j] = (add ? cr[j] : 0.0f) + t[j];
    }
  }
}
#endif

template <int MR>
void micro(bool simd, const float* a, size_t lda, const float* panel, int kc, float* c, size_t ldc, int cols,
           bool add) {
#if defined(__x86_64__)
  if (simd) return micro_avx2<MR>(a, lda, panel, kc, c, ldc, cols, add);
#endif
  micro_plain<MR>(a, lda, panel, kc, c, ldc, cols, add);
}

// Rows of x per register block, and values of k per cache block.
constexpr int kRows = 6;
constexpr int kDepth = 256;

}  // namespace

void qmm_panels(const QmmProblem& p, int n0, int n1) {
  const bool simd = detect_isa() != Isa::Plain;
  const int groups = p.K / p.gs;
  thread_local std::vector<float> panel, s, b;
  panel.resize(static_cast<size_t>(p.K) * kPanel);
  s.resize(groups);
  b.resize(groups);
  for (int n = n0; n < n1; n += kPanel) {
    pack_panel(p, n, panel.data(), s.data(), b.data());
    const int cols = std::min(kPanel, n1 - n);
    for (int k0 = 0; k0 < p.K; k0 += kDepth) {
      const int kc = std::min(kDepth, p.K - k0);
      const float* pk = panel.data() + static_cast<size_t>(k0) * kPanel;
      const bool add = k0 > 0;
      int m = 0;
      for (; m + kRows <= p.M; m += kRows) {
        micro<kRows>(simd, p.x + static_cast<size_t>(m) * p.K + k0, p.K, pk, kc, p.out + static_cast<size_t>(m) * p.N + n,
                     p.N, cols, add);
      }
      const float* a = p.x + static_cast<size_t>(m) * p.K + k0;
      float* c = p.out + static_cast<size_t>(m) * p.N + n;
      switch (p.M - m) {
        case 5:
          micro<5>(simd, a, p.K, pk, kc, c, p.N, cols, add);
          break;
        case 4:
          micro<4>(simd, a, p.K, pk, kc, c, p.N, cols, add);
          break;
        case 3:
          micro<3>(simd, a, p.K, pk, kc, c, p.N, cols, add);
          break;
        case 2:
          micro<2>(simd, a, p.K, pk, kc, c, p.N, cols, add);
          break;
        case 1:
          micro<1>(simd, a, p.K, pk, kc, c, p.N, cols, add);
          break;
        default:
          break;
      }
    }
  }
}

}  // namespace famlx
