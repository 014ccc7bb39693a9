// Kernels of famlx's CPU quantized matmul (cpu_qmm.cpp): out = x @ W.T for
// W in MLX's affine layout, W[n, k] = scale[n, g] * q[n, k] + bias[n, g] with
// g = k / group_size and q packed little-endian into 32-bit words.
#pragma once

#include <cstdint>
#include <vector>

#include "mlx/array.h"

namespace famlx {

// One product's operands. x, out: row-major float32 [M, K] and [M, N]; w:
// [N, K * bits / 32] words; scales, biases: [N, K / gs] in scale_dtype.
struct QmmProblem {
  const float* x;
  const uint32_t* w;
  const void* scales;
  const void* biases;
  mlx::core::Dtype scale_dtype;
  float* out;
  int M, N, K, gs, bits;
};

// The instruction sets the kernels have paths for, in order.
enum class Isa { Plain, Avx2, Avx512 };

// The best the CPU has, capped by FAMLX_CPU_ISA=plain|avx2 (for tests).
Isa detect_isa();

// What qmm_rows needs of x, computed once per product: each group's sum
// (a group's biases cost one multiply) and, for the 4-bit SIMD path, x in
// the order that path unpacks weights.
struct QmmRowsInput {
  explicit QmmRowsInput(const QmmProblem& p);
  Isa isa;
  std::vector<float> xsum;
  std::vector<float> xp;
};

// Output columns [n0, n1) of every row, one weight row at a time (for few
// rows of x: decode). Needs gs % 8 == 0.
void qmm_rows(const QmmProblem& p, const QmmRowsInput& in, int n0, int n1);

// Output columns [n0, n1) of every row through dequantized weight panels and
// a register-blocked float kernel (for many rows of x: prefill). Needs
// gs % 8 == 0.
void qmm_panels(const QmmProblem& p, int n0, int n1);

// A product with float16 / bfloat16 activations, scales and biases (all of
// `dtype`), computed as MLX's CPU kernel does in that type (cpu_qmm_half.cpp).
struct QmmHalf {
  const uint32_t* w;
  const void* scales;
  const void* biases;
  mlx::core::Dtype dtype;
  void* out;
  int M, N, K, gs, bits;
};

// out = x @ dequantize(w).T for x of p.dtype (row-major when
// x_contiguous, else read through xa's strides). Needs AVX-512.
void qmm_half(const QmmHalf& p, const void* x, bool x_contiguous, const mlx::core::array& xa);

// The width of qmm_panels's column panels; split work on its multiples.
constexpr int kPanel = 16;

}  // namespace famlx
