// Helpers shared by famlx's CPU primitives (cpu_qmm.cpp, cpu_norm.cpp,
// cpu_rope.cpp): element access in any float dtype and strided offsets.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "mlx/array.h"

namespace famlx {

// Element i of a float32 / float16 / bfloat16 buffer as float (0 otherwise).
inline float to_float(const void* p, mlx::core::Dtype t, size_t i) {
  switch (t) {
    case mlx::core::float32:
      return static_cast<const float*>(p)[i];
    case mlx::core::float16:
      return static_cast<float>(static_cast<const mlx::core::float16_t*>(p)[i]);
    case mlx::core::bfloat16:
      return static_cast<float>(static_cast<const mlx::core::bfloat16_t*>(p)[i]);
    default:
      return 0.0f;
  }
}

// Stores v at element i, rounded to the buffer's dtype.
inline void store(void* p, mlx::core::Dtype t, size_t i, float v) {
  switch (t) {
    case mlx::core::float32:
      static_cast<float*>(p)[i] = v;
      break;
    case mlx::core::float16:
      static_cast<mlx::core::float16_t*>(p)[i] = static_cast<mlx::core::float16_t>(v);
      break;
    case mlx::core::bfloat16:
      static_cast<mlx::core::bfloat16_t*>(p)[i] = static_cast<mlx::core::bfloat16_t>(v);
      break;
    default:
      break;
  }
}

// The element offset of linear (row-major) index i of `a`, for inputs that
// are not row-contiguous.
inline size_t offset_of(const mlx::core::array& a, size_t i) {
  size_t off = 0;
  for (int d = static_cast<int>(a.ndim()) - 1; d >= 0; d--) {
    const size_t dim = static_cast<size_t>(a.shape(d));
    off += (i % dim) * static_cast<size_t>(a.strides()[d]);
    i /= dim;
  }
  return off;
}

// a's elements in row-major order: its own buffer when row-contiguous,
// else copied into buf.
inline const void* contiguous(const mlx::core::array& a, std::vector<uint8_t>& buf) {
  if (a.flags().row_contiguous) return a.data<void>();
  const size_t item = a.itemsize();
  buf.resize(a.size() * item);
  const uint8_t* src = a.data<uint8_t>();
  for (size_t i = 0; i < a.size(); i++) std::memcpy(buf.data() + i * item, src + offset_of(a, i) * item, item);
  return buf.data();
}

// Whether environment variable `name` is set to `value`. Read on each call
// (graph building, not kernels), so tests can switch a primitive off.
inline bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v && std::string(v) == value;
}

// Whether t is one of the float dtypes the primitives take.
inline bool is_float(mlx::core::Dtype t) {
  return t == mlx::core::float32 || t == mlx::core::float16 || t == mlx::core::bfloat16;
}

}  // namespace famlx
