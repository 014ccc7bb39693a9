// A CPU quantized matmul for MLX's affine layout (x @ dequantize(w).T), as a
// custom MLX primitive: graph building, async_eval and compile treat it like
// MLX's own QuantizedMatmul, whose CPU kernel it replaces on CPU streams.
// The kernels are in cpu_qmm_kernels.cpp; this file checks operands, lays
// them out and splits the work over the CPU threads (cpu_pool.cpp).
#include "cpu_ops.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "cpu_common.h"
#include "cpu_pool.h"
#include "cpu_qmm_kernels.h"
#include "mlx/allocator.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/primitives.h"

namespace mx = mlx::core;

namespace famlx {
namespace {

// From this many rows of x on, weights are dequantized into panels once
// and reused by every row (prefill); below it each row streams the packed
// weights (decode).
constexpr int kPanelRows = 4;

// Products smaller than this many multiply-adds stay on one thread (waking
// a worker costs more).
constexpr double kThreadMacs = 1 << 17;

void run(const QmmProblem& p) {
  const int threads = cpu_threads();
  const bool split = threads > 1 && static_cast<double>(p.M) * p.N * p.K >= kThreadMacs;
  if (p.M >= kPanelRows) {
    const int panels = (p.N + kPanel - 1) / kPanel;
    const int parts = split ? std::min(panels, threads * 4) : 1;
    const int per = (panels + parts - 1) / parts;
    parallel_run(parts, [&](int i) {
      const int n0 = i * per * kPanel;
      qmm_panels(p, n0, std::min(p.N, n0 + per * kPanel));
    });
    return;
  }
  const QmmRowsInput in(p);
  const int parts = split ? threads * 4 : 1;
  const int per = ((p.N + parts - 1) / parts + 7) / 8 * 8;
  parallel_run(parts, [&](int i) {
    const int n0 = std::min(p.N, i * per);
    qmm_rows(p, in, n0, std::min(p.N, n0 + per));
  });
}

class CpuQuantizedMatmul : public mx::UnaryPrimitive {
 public:
  CpuQuantizedMatmul(mx::Stream s, int group_size, int bits)
      : mx::UnaryPrimitive(s), group_size_(group_size), bits_(bits) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    const mx::array& x = inputs[0];
    const mx::array& w = inputs[1];
    const mx::array& scales = inputs[2];
    const mx::array& biases = inputs[3];
    out.set_data(mx::allocator::malloc(out.nbytes()));
    auto& enc = mx::cpu::get_command_encoder(stream());
    enc.set_input_array(x);
    enc.set_input_array(w);
    enc.set_input_array(scales);
    enc.set_input_array(biases);
    enc.set_output_array(out);
    const int gs = group_size_, bits = bits_;
    enc.dispatch([x, w, scales, biases, out, gs, bits]() mutable {
      const int K = x.shape(-1);
      const int M = static_cast<int>(x.size() / K);
      const int N = w.shape(0);
      // Weights, scales and biases are row-contiguous as loaded; any other
      // layout is copied so.
      std::vector<uint8_t> wc, sc, bc;
      const uint32_t* wp = static_cast<const uint32_t*>(contiguous(w, wc));
      const void* sp = contiguous(scales, sc);
      const void* bp = contiguous(biases, bc);
      if (x.dtype() != mx::float32) {
        // Half precision: computed in that type.
        qmm_half(QmmHalf{wp, sp, bp, x.dtype(), out.data<void>(), M, N, K, gs, bits}, x.data<void>(),
                 x.flags().row_contiguous, x);
        return;
      }
      // x as row-major float32 (a view of it when it already is).
      std::vector<uint8_t> xc;
      const float* xp = static_cast<const float*>(contiguous(x, xc));
      run(QmmProblem{xp, wp, sp, bp, scales.dtype(), out.data<float>(), M, N, K, gs, bits});
    });
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("famlx's CPU quantized matmul runs on CPU streams only");
  }

  const char* name() const override {
    return "FamlxCpuQuantizedMatmul";
  }

  bool is_equivalent(const mx::Primitive& other) const override {
    auto& o = static_cast<const CpuQuantizedMatmul&>(other);
    return group_size_ == o.group_size_ && bits_ == o.bits_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override {
    auto s = inputs[0].shape();
    s.back() = inputs[1].shape(0);
    return {s};
  }

 private:
  int group_size_;
  int bits_;
};

}  // namespace

std::optional<mx::array> cpu_quantized_matmul(const mx::array& x, const mx::array& w, const mx::array& scales,
                                              const std::optional<mx::array>& biases, bool transpose, int group_size,
                                              int bits, const std::string& mode) {
  const bool off = env_is("FAMLX_CPU_QMM", "mlx");
  mx::Stream s = mx::default_stream(mx::default_device());
  if (off || s.device != mx::Device::cpu || !transpose || mode != "affine" || !biases) return std::nullopt;
  // 5 bits (GGUF's Q5 types) with whole 32-value groups, float32 x only.
  const bool five = bits == 5 && group_size % 32 == 0 && x.dtype() == mx::float32;
  if (!(bits == 4 || bits == 8 || five) || group_size % 8 != 0 || x.ndim() < 1 || w.ndim() != 2) return std::nullopt;
  const int K = x.shape(-1);
  if (K == 0 || K % group_size != 0 || w.shape(1) * 32 / bits != K) return std::nullopt;
  if (scales.shape() != biases->shape() || scales.ndim() != 2 || scales.shape(0) != w.shape(0) ||
      scales.shape(1) != K / group_size)
    return std::nullopt;
  // float32 activations get float32 sums in famlx's order (within 1e-5 of
  // the float32 product, tested); float16/bfloat16 ones are summed in that
  // type exactly as MLX's kernel sums them (bit for bit, tested).
  if (!is_float(scales.dtype()) || biases->dtype() != scales.dtype() || w.dtype() != mx::uint32) return std::nullopt;
  // Half-precision x: computed as MLX's kernel computes it in that type
  // (cpu_qmm_half.cpp), with AVX-512 and matching scales only.
  const bool half = x.dtype() == mx::float16 || x.dtype() == mx::bfloat16;
  if (half && (scales.dtype() != x.dtype() || detect_isa() != Isa::Avx512)) return std::nullopt;
  if (!half && x.dtype() != mx::float32) return std::nullopt;
  auto shape = x.shape();
  shape.back() = w.shape(0);
  // float32 x makes a float32 result whatever the scales' type, as MLX's op.
  return mx::array(shape, x.dtype(), std::make_shared<CpuQuantizedMatmul>(s, group_size, bits), {x, w, scales, *biases});
}

}  // namespace famlx
