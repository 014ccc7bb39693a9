// famlx's CPU quantized matmul (see cpu_qmm.cpp).
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

}  // namespace famlx
