// famlx's CPU primitives: quantized matmul (cpu_qmm.cpp), RMS norm
// (cpu_norm.cpp), RoPE and attention (cpu_attention.cpp), half-precision
// matmul (cpu_matmul.cpp), SwiGLU (cpu_activation.cpp).
#pragma once

#include <optional>
#include <string>

#include "mlx/array.h"

namespace famlx {

// x @ dequantize(w, scales, biases).T on the default stream when it is a CPU
// stream and the operands fit the kernel (affine, 4 or 8 bits, transposed,
// evaluated row-contiguous weights); nullopt otherwise (or with
// FAMLX_CPU_QMM=mlx), for MLX's own op.
std::optional<mlx::core::array> cpu_quantized_matmul(const mlx::core::array& x, const mlx::core::array& w,
                                                     const mlx::core::array& scales,
                                                     const std::optional<mlx::core::array>& biases, bool transpose,
                                                     int group_size, int bits, const std::string& mode);

// RMS norm over the last axis on a CPU stream as one node (MLX's CPU path
// decomposes it into eight); nullopt elsewhere or with FAMLX_CPU_NORM=mlx.
std::optional<mlx::core::array> cpu_rms_norm(const mlx::core::array& x, const std::optional<mlx::core::array>& w,
                                             float eps);

// mx::fast::rope on a CPU stream as one node, bit-equal to MLX's fallback
// graph (float32 x of 3 or 4 dimensions); nullopt elsewhere or with
// FAMLX_CPU_ROPE=mlx.
std::optional<mlx::core::array> cpu_rope(const mlx::core::array& x, int dims, bool traditional,
                                         std::optional<float> base, float scale, const mlx::core::array& offset,
                                         const std::optional<mlx::core::array>& freqs);

// mx::fast::scaled_dot_product_attention on a CPU stream as one node,
// bit-equal to MLX's fallback graph (float32 operands; no mask, causal, a
// boolean or additive mask, sinks); nullopt elsewhere or with
// FAMLX_CPU_SDPA=mlx.
std::optional<mlx::core::array> cpu_attention(const mlx::core::array& q, const mlx::core::array& k,
                                              const mlx::core::array& v, float scale, const std::string& mask_mode,
                                              const std::optional<mlx::core::array>& mask,
                                              const std::optional<mlx::core::array>& sinks);

// a @ b for float16 / bfloat16 operands with b 2-d (x @ W.T) on a CPU
// stream with AVX-512, bit-equal to MLX's CPU kernel; nullopt elsewhere or
// with FAMLX_CPU_MATMUL=mlx.
std::optional<mlx::core::array> cpu_half_matmul(const mlx::core::array& a, const mlx::core::array& b);

// silu(gate) * up on a CPU stream as one node, bit-equal to MLX's compiled
// kernel for that graph; nullopt elsewhere or with FAMLX_CPU_SWIGLU=mlx.
std::optional<mlx::core::array> cpu_swiglu(const mlx::core::array& gate, const mlx::core::array& up);

}  // namespace famlx
