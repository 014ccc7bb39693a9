// x86-64 SIMD intrinsics for famlx's CPU kernels, and the target attribute
// of their AVX-512 functions (chosen at run time: see detect_isa).
#pragma once

#if defined(__x86_64__)
// GCC 12 flags the intrinsics' own placeholder values (`__Y = __Y`).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

// Functions that use AVX-512 (F, BW, VL, DQ) with AVX2, FMA and F16C.
#define FAMLX_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))

namespace famlx {

// r[i][j] <- r[j][i] for a 16x16 block of floats held in 16 registers.
FAMLX_AVX512 inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; i++) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; i++) {
    const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 2]);
    const __m512d c = _mm512_castps_pd(t[4 * i + 1]), d = _mm512_castps_pd(t[4 * i + 3]);
    r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
    r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
    r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
  }
  // Now r[4i + q] holds, in each 128-bit lane l, row 4l'.. of column q of
  // row group i; gather 128-bit lanes across groups.
  for (int q = 0; q < 4; q++) {
    const __m512 a0 = _mm512_shuffle_f32x4(r[q], r[4 + q], 0x88);
    const __m512 a1 = _mm512_shuffle_f32x4(r[q], r[4 + q], 0xDD);
    const __m512 b0 = _mm512_shuffle_f32x4(r[8 + q], r[12 + q], 0x88);
    const __m512 b1 = _mm512_shuffle_f32x4(r[8 + q], r[12 + q], 0xDD);
    t[q] = _mm512_shuffle_f32x4(a0, b0, 0x88);
    t[8 + q] = _mm512_shuffle_f32x4(a0, b0, 0xDD);
    t[4 + q] = _mm512_shuffle_f32x4(a1, b1, 0x88);
    t[12 + q] = _mm512_shuffle_f32x4(a1, b1, 0xDD);
  }
  for (int i = 0; i < 16; i++) r[i] = t[i];
}

}  // namespace famlx
#endif
