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
#endif
