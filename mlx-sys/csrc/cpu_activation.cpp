// SwiGLU (silu(gate) * up) on CPU streams as one MLX primitive computing,
// element by element, exactly what MLX's compiled CPU kernel for that graph
// computes: its own Sigmoid and Multiply functors (MLX's CPU headers) in
// the arrays' type, each result rounded to it. On CPU, MLX builds compiled
// graphs by running the system C++ compiler at run time; this needs none.
#include <stdexcept>
#include <vector>

#include "cpu_common.h"
#include "cpu_ops.h"
#include "mlx/allocator.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/primitives.h"

// MLX's CPU headers compare mixed signedness; they are not ours to fix.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsign-compare"
#include "mlx/backend/cpu/binary_ops.h"
#include "mlx/backend/cpu/unary_ops.h"
#pragma GCC diagnostic pop

namespace mx = mlx::core;

namespace famlx {
namespace {

template <typename T>
void swiglu_rows(const mx::array& g, const mx::array& u, mx::array& out) {
  const size_t n = out.size();
  const int D = out.shape(-1);
  const T* gp = g.data<T>();
  const T* up = u.data<T>();
  T* o = out.data<T>();
  const bool gc = g.flags().row_contiguous, uc = u.flags().row_contiguous;
  const bool g_rows = g.strides().back() == 1, u_rows = u.strides().back() == 1;
  for (size_t r = 0; r < n / D; r++) {
    const size_t base = r * D;
    const size_t gb = gc ? base : offset_of(g, base), ub = uc ? base : offset_of(u, base);
    for (int i = 0; i < D; i++) {
      const T a = gp[g_rows ? gb + i : offset_of(g, base + i)];
      const T b = up[u_rows ? ub + i : offset_of(u, base + i)];
      const T s = mx::detail::Sigmoid{}(a);
      const T m = mx::detail::Multiply{}(a, s);
      o[base + i] = mx::detail::Multiply{}(m, b);
    }
  }
}

class CpuSwiglu : public mx::UnaryPrimitive {
 public:
  explicit CpuSwiglu(mx::Stream s) : mx::UnaryPrimitive(s) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    out.set_data(mx::allocator::malloc(out.nbytes()));
    auto& enc = mx::cpu::get_command_encoder(stream());
    enc.set_input_array(inputs[0]);
    enc.set_input_array(inputs[1]);
    enc.set_output_array(out);
    enc.dispatch([g = inputs[0], u = inputs[1], out]() mutable {
      switch (out.dtype()) {
        case mx::float16:
          swiglu_rows<mx::float16_t>(g, u, out);
          break;
        case mx::bfloat16:
          swiglu_rows<mx::bfloat16_t>(g, u, out);
          break;
        default:
          swiglu_rows<float>(g, u, out);
      }
    });
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("famlx's CPU SwiGLU runs on CPU streams only");
  }
  const char* name() const override {
    return "FamlxCpuSwiglu";
  }
  bool is_equivalent(const mx::Primitive&) const override {
    return true;
  }
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override {
    return {inputs[0].shape()};
  }
};

}  // namespace

std::optional<mx::array> cpu_swiglu(const mx::array& gate, const mx::array& up) {
  mx::Stream s = mx::default_stream(mx::default_device());
  if (env_is("FAMLX_CPU_SWIGLU", "mlx") || s.device != mx::Device::cpu || !is_float(gate.dtype()) ||
      up.dtype() != gate.dtype() || up.shape() != gate.shape() || gate.ndim() < 1 || gate.size() == 0) {
    return std::nullopt;
  }
  return mx::array(gate.shape(), gate.dtype(), std::make_shared<CpuSwiglu>(s), {gate, up});
}

}  // namespace famlx
