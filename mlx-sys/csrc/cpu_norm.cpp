// famlx's RMS norm on CPU streams, as one MLX primitive.
#include <cmath>
#include <stdexcept>
#include <vector>

#include "cpu_common.h"
#include "cpu_ops.h"
#include "mlx/allocator.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/primitives.h"

namespace mx = mlx::core;

namespace famlx {

namespace {

// RMS norm over the last axis, as MLX's CPU fallback computes it (float32
// mean of squares, rsqrt, the cast to the output type, then the weight in
// that type) but as one node instead of eight.
class CpuRmsNorm : public mx::UnaryPrimitive {
 public:
  CpuRmsNorm(mx::Stream s, float eps, bool weighted) : mx::UnaryPrimitive(s), eps_(eps), weighted_(weighted) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    const mx::array& x = inputs[0];
    std::optional<mx::array> w;
    if (weighted_) w = inputs[1];
    out.set_data(mx::allocator::malloc(out.nbytes()));
    auto& enc = mx::cpu::get_command_encoder(stream());
    for (auto& a : inputs) enc.set_input_array(a);
    enc.set_output_array(out);
    const float eps = eps_;
    enc.dispatch([x, w, out, eps]() mutable {
      const int D = x.shape(-1);
      const size_t rows = x.size() / D;
      const bool xc = x.flags().row_contiguous;
      const bool wc = !w || w->flags().row_contiguous;
      std::vector<float> row(D);
      for (size_t r = 0; r < rows; r++) {
        float ss = 0.0f;
        for (int i = 0; i < D; i++) {
          const size_t li = r * D + i;
          row[i] = to_float(x.data<void>(), x.dtype(), xc ? li : offset_of(x, li));
          ss += row[i] * row[i];
        }
        // mean as MLX takes it: the sum times 1/D (rounded to float32).
        const float inv = 1.0f / std::sqrt(ss * static_cast<float>(1.0 / D) + eps);
        for (int i = 0; i < D; i++) {
          // Rounded to the output type before the weight, as the fallback.
          float y = row[i] * inv;
          const size_t li = r * D + i;
          store(out.data<void>(), out.dtype(), li, y);
          if (w) {
            const float v = to_float(out.data<void>(), out.dtype(), li);
            const float wv = to_float(w->data<void>(), w->dtype(), wc ? i : offset_of(*w, i));
            store(out.data<void>(), out.dtype(), li, v * wv);
          }
        }
      }
    });
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("famlx's CPU RMS norm runs on CPU streams only");
  }

  const char* name() const override {
    return "FamlxCpuRmsNorm";
  }

  bool is_equivalent(const mx::Primitive& other) const override {
    auto& o = static_cast<const CpuRmsNorm&>(other);
    return eps_ == o.eps_ && weighted_ == o.weighted_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override {
    return {inputs[0].shape()};
  }

 private:
  float eps_;
  bool weighted_;
};

}  // namespace

std::optional<mx::array> cpu_rms_norm(const mx::array& x, const std::optional<mx::array>& w, float eps) {
  const bool off = env_is("FAMLX_CPU_NORM", "mlx");
  mx::Stream s = mx::default_stream(mx::default_device());
  if (off || s.device != mx::Device::cpu || x.ndim() < 1 || !is_float(x.dtype())) return std::nullopt;
  if (w && (w->ndim() != 1 || w->shape(0) != x.shape(-1) || !is_float(w->dtype()))) return std::nullopt;
  mx::Dtype out = w ? mx::promote_types(x.dtype(), w->dtype()) : x.dtype();
  std::vector<mx::array> in{x};
  if (w) in.push_back(*w);
  return mx::array(x.shape(), out, std::make_shared<CpuRmsNorm>(s, eps, w.has_value()), in);
}

}  // namespace famlx
