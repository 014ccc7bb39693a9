// RoPE and scaled dot-product attention on CPU streams as one MLX primitive
// each. On CPU streams MLX computes both through fallback graphs (RoPE in
// about 20 nodes, attention in about 10 plus two reference-BLAS matmuls);
// these primitives do the same arithmetic, operation by operation and in
// the same order, so results stay bit-equal to MLX's:
// - products and sums rounded one at a time (this file is compiled with
//   -ffp-contract=off), each dot product summed in order from zero as the
//   reference BLAS's sgemm does;
// - exp, sin and cos through MLX's own CPU implementations (its simd
//   headers), softmax as MLX's CPU softmax (max, exp, sum, times 1/sum).
// SIMD paths vectorize across independent outputs only, never across a sum.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "cpu_common.h"
#include "cpu_ops.h"
#include "cpu_pool.h"
#include "cpu_qmm_kernels.h"
#include "mlx/allocator.h"
#include "mlx/backend/cpu/encoder.h"
// MLX's simd headers compare mixed signedness; they are not ours to fix.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsign-compare"
#include "mlx/backend/cpu/simd/simd.h"
#pragma GCC diagnostic pop
#include "mlx/ops.h"
#include "mlx/primitives.h"

#include "cpu_simd.h"

namespace mx = mlx::core;
namespace simd = mlx::core::simd;

namespace famlx {
namespace {

// Element offsets of a 4-d view: base + i0 * s0 + ... (strides in elements).
struct View4 {
  explicit View4(const mx::array& a) {
    const int pad = 4 - static_cast<int>(a.ndim());
    for (int d = 0; d < 4; d++) {
      shape[d] = d < pad ? 1 : a.shape(d - pad);
      stride[d] = d < pad ? 0 : static_cast<size_t>(a.strides()[d - pad]);
    }
  }
  size_t at(int a, int b, int c, int d) const {
    return a * stride[0] + b * stride[1] + c * stride[2] + d * stride[3];
  }
  int shape[4];
  size_t stride[4];
};

// v rounded to element type T and back (float: v itself), as MLX's
// operations on T round each result.
template <typename T>
inline float round_as(float v) {
  return static_cast<float>(static_cast<T>(v));
}

// v rounded to dtype t (float32, float16 or bfloat16).
inline float rounded(mx::Dtype t, float v) {
  switch (t) {
    case mx::float16:
      return round_as<mx::float16_t>(v);
    case mx::bfloat16:
      return round_as<mx::bfloat16_t>(v);
    default:
      return v;
  }
}

// The lowest finite value of dtype t (finfo(t).min, a boolean mask's fill).
inline float lowest(mx::Dtype t) {
  switch (t) {
    case mx::float16:
      return -65504.0f;
    case mx::bfloat16:
      return -3.38953139e38f;
    default:
      return -FLT_MAX;
  }
}

// cos and sin per (table, position, frequency).
struct RopeTables {
  const float* c;
  const float* s;
  int tables, T, half;
};

// The rotation of every row of x (viewed [B, N, T, D]) in element type T:
// x1 * cos - x2 * sin and x1 * sin + x2 * cos, each product and sum rounded
// to T as the fallback's separate operations round them.
template <typename T>
void rope_rows(const mx::array& x, const View4& xv, const RopeTables& tb, int dims, bool traditional, mx::array& out) {
  const int B = xv.shape[0], N = xv.shape[1], L = xv.shape[2], D = xv.shape[3], half = tb.half;
  const T* xp = x.data<T>();
  T* o = out.data<T>();
  for (int b = 0; b < B; b++) {
    for (int n = 0; n < N; n++) {
      for (int t = 0; t < L; t++) {
        const size_t base_in = xv.at(b, n, t, 0), step = xv.stride[3];
        T* orow = o + ((static_cast<size_t>(b) * N + n) * L + t) * D;
        const size_t row = (static_cast<size_t>(tb.tables > 1 ? b : 0) * L + t) * half;
        const float* cr = tb.c + row;
        const float* sr = tb.s + row;
        for (int i = 0; i < half; i++) {
          const int i1 = traditional ? 2 * i : i, i2 = traditional ? 2 * i + 1 : i + half;
          const float x1 = static_cast<float>(xp[base_in + i1 * step]);
          const float x2 = static_cast<float>(xp[base_in + i2 * step]);
          const float a = round_as<T>(x1 * cr[i]), bb = round_as<T>(x2 * sr[i]);
          const float e = round_as<T>(x1 * sr[i]), f = round_as<T>(x2 * cr[i]);
          orow[i1] = static_cast<T>(a - bb);
          orow[i2] = static_cast<T>(e + f);
        }
        for (int i = dims; i < D; i++) orow[i] = xp[base_in + i * step];
      }
    }
  }
}

// ---- RoPE -------------------------------------------------------------------

class CpuRope : public mx::UnaryPrimitive {
 public:
  CpuRope(mx::Stream s, int dims, bool traditional, float base, float scale, bool has_freqs)
      : mx::UnaryPrimitive(s), dims_(dims), traditional_(traditional), base_(base), scale_(scale),
        has_freqs_(has_freqs) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    out.set_data(mx::allocator::malloc(out.nbytes()));
    auto& enc = mx::cpu::get_command_encoder(stream());
    for (auto& a : inputs) enc.set_input_array(a);
    enc.set_output_array(out);
    const mx::array x = inputs[0], offset = inputs[1];
    std::optional<mx::array> freqs;
    if (has_freqs_) freqs = inputs[2];
    enc.dispatch([x, offset, freqs, out, dims = dims_, traditional = traditional_, base = base_,
                  scale = scale_]() mutable {
      const int T = x.shape(-2), B = x.shape(0);
      const int half = dims / 2;
      // The fallback's inverse frequencies: exp(-i * (log(base) / half)),
      // or 1 / freqs.
      std::vector<float> inv(half);
      for (int i = 0; i < half; i++) {
        if (freqs) {
          inv[i] = simd::recip(simd::Simd<float, 1>(freqs->data<float>()[offset_of(*freqs, i)])).value;
        } else {
          const float step = std::log(base) / half;
          inv[i] = simd::exp(simd::Simd<float, 1>(static_cast<float>(-i) * step)).value;
        }
      }
      // [B, N, T, D] as the fallback sees x (a 3-d x is [B, 1, T, D]).
      View4 xv(x);
      if (x.ndim() == 3) {
        xv.shape[0] = x.shape(0), xv.shape[1] = 1, xv.stride[0] = x.strides()[0], xv.stride[1] = 0;
      }
      const int* off = offset.data<int>();
      // cos and sin per (batch, position): batches share them unless their
      // offsets differ.
      const int tables = offset.size() > 1 ? B : 1;
      std::vector<float> c(static_cast<size_t>(tables) * T * half), s(c.size());
      for (int b = 0; b < tables; b++) {
        const int ob = off[tables > 1 ? offset_of(offset, b) : 0];
        for (int t = 0; t < T; t++) {
          // positions = (arange(T) + offset) * scale, in float32.
          const float p = (static_cast<float>(t) + static_cast<float>(ob)) * scale;
          for (int i = 0; i < half; i++) {
            const float theta = p * inv[i];
            const size_t at = (static_cast<size_t>(b) * T + t) * half + i;
            // astype(cos(theta), x.dtype) as the fallback.
            c[at] = rounded(x.dtype(), simd::cos(simd::Simd<float, 1>(theta)).value);
            s[at] = rounded(x.dtype(), simd::sin(simd::Simd<float, 1>(theta)).value);
          }
        }
      }
      const RopeTables tb{c.data(), s.data(), tables, T, half};
      switch (x.dtype()) {
        case mx::float16:
          rope_rows<mx::float16_t>(x, xv, tb, dims, traditional, out);
          break;
        case mx::bfloat16:
          rope_rows<mx::bfloat16_t>(x, xv, tb, dims, traditional, out);
          break;
        default:
          rope_rows<float>(x, xv, tb, dims, traditional, out);
      }
    });
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("famlx's CPU RoPE runs on CPU streams only");
  }
  const char* name() const override {
    return "FamlxCpuRope";
  }
  bool is_equivalent(const mx::Primitive& other) const override {
    auto& o = static_cast<const CpuRope&>(other);
    return dims_ == o.dims_ && traditional_ == o.traditional_ && base_ == o.base_ && scale_ == o.scale_ &&
           has_freqs_ == o.has_freqs_;
  }
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override {
    return {inputs[0].shape()};
  }

 private:
  int dims_;
  bool traditional_;
  float base_, scale_;
  bool has_freqs_;
};

// ---- attention ------------------------------------------------------------

enum class MaskKind { None, Causal, Bool, Additive };

struct Attn {
  mx::array q, k, v;
  std::optional<mx::array> mask, sinks;
  MaskKind kind;
  float scale;
  void* out;
};

#if defined(__x86_64__)

// scores[j] = sum_k qs[k] * kt[k * 16 + j] for 16 keys, summed in k order.
FAMLX_AVX512 void scores16_avx512(const float* qs, const float* kt, int D, float* scores) {
  __m512 acc = _mm512_setzero_ps();
  for (int k = 0; k < D; k++) acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_set1_ps(qs[k]), _mm512_loadu_ps(kt + k * 16)));
  _mm512_storeu_ps(scores, acc);
}

// Keys [Lk][D] (row stride ks) as blocks of 16 keys, [block][k][16] (keys
// past Lk zero), 16x16 at a time in registers.
FAMLX_AVX512 void transpose_keys(const float* kb, size_t ks, int Lk, int D, float* kt) {
  __m512 r[16];
  for (int j0 = 0; j0 < Lk; j0 += 16) {
    const int rows = std::min(16, Lk - j0);
    for (int k0 = 0; k0 < D; k0 += 16) {
      const int kn = std::min(16, D - k0);
      const __mmask16 m = kn >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << kn) - 1);
      for (int j = 0; j < 16; j++) {
        r[j] = j < rows ? _mm512_maskz_loadu_ps(m, kb + (j0 + j) * ks + k0) : _mm512_setzero_ps();
      }
      transpose16(r);
      float* dst = kt + (static_cast<size_t>(j0 / 16) * D + k0) * 16;
      for (int k = 0; k < kn; k++) _mm512_storeu_ps(dst + k * 16, r[k]);
    }
  }
}

// acc[d] += p * v[d] for d < Dv (Dv % 16 == 0), one rounding per operation.
FAMLX_AVX512 void axpy_avx512(float p, const float* v, int Dv, float* acc) {
  const __m512 pv = _mm512_set1_ps(p);
  for (int d = 0; d < Dv; d += 16) {
    _mm512_storeu_ps(acc + d, _mm512_add_ps(_mm512_loadu_ps(acc + d), _mm512_mul_ps(pv, _mm512_loadu_ps(v + d))));
  }
}
#endif

// One (batch, kv head): every query row of its query heads. Operands are
// read as float; results are rounded to the operands' dtype where the
// fallback's operations in that dtype round them (products of float16 or
// bfloat16 values are exact in float, and MLX's half-precision matmul sums
// them in float32 in order, rounding once at the end).
void attend(const Attn& a, int b, int kvh, Isa isa) {
  const View4 qv(a.q), kv(a.k), vv(a.v);
  const mx::Dtype dt = a.q.dtype();
  const int Hq = qv.shape[1], Lq = qv.shape[2], D = qv.shape[3];
  const int Hkv = kv.shape[1], Lk = kv.shape[2], Dv = vv.shape[3];
  const int reps = Hq / Hkv;
  const int offset = Lk - Lq;
  const bool has_sink = a.sinks.has_value();
  std::optional<View4> mv;
  if (a.mask) mv.emplace(*a.mask);
  // This head's keys and values as float rows: the arrays' own rows for
  // float32 with unit last stride, else converted copies. Keys are also
  // transposed in blocks of 16 ([block][k][16]) for the SIMD score loop.
  std::vector<float> kr, vr;
  const float* kbase = nullptr;
  const float* vbase = nullptr;
  size_t kstride = D, vstride = Dv;
  if (dt == mx::float32 && kv.stride[3] == 1) {
    kbase = a.k.data<float>() + kv.at(b, kvh, 0, 0);
    kstride = kv.stride[2];
  } else {
    kr.resize(static_cast<size_t>(Lk) * D);
    for (int j = 0; j < Lk; j++) {
      for (int k = 0; k < D; k++) kr[static_cast<size_t>(j) * D + k] = to_float(a.k.data<void>(), dt, kv.at(b, kvh, j, k));
    }
    kbase = kr.data();
  }
  if (dt == mx::float32 && vv.stride[3] == 1) {
    vbase = a.v.data<float>() + vv.at(b, kvh, 0, 0);
    vstride = vv.stride[2];
  } else {
    vr.resize(static_cast<size_t>(Lk) * Dv);
    for (int j = 0; j < Lk; j++) {
      for (int d = 0; d < Dv; d++) vr[static_cast<size_t>(j) * Dv + d] = to_float(a.v.data<void>(), dt, vv.at(b, kvh, j, d));
    }
    vbase = vr.data();
  }
  const int blocks = (Lk + 15) / 16;
  const bool wide = isa == Isa::Avx512;
  std::vector<float> kt;
  if (wide) {
    kt.resize(static_cast<size_t>(blocks) * D * 16);
    transpose_keys(kbase, kstride, Lk, D, kt.data());
  }
  const bool wide_v = wide && Dv % 16 == 0;
  // The fallback multiplies q by array(scale, dtype): the scale in dtype.
  const float scale = rounded(dt, a.scale);
  const float fill = lowest(dt);
  std::vector<float> qs(D), row(Lk + 1), acc(Dv);
  for (int r = 0; r < reps; r++) {
    const int h = kvh * reps + r;
    for (int i = 0; i < Lq; i++) {
      for (int k = 0; k < D; k++) qs[k] = rounded(dt, scale * to_float(a.q.data<void>(), dt, qv.at(b, h, i, k)));
      // Keys a causal mask hides contribute exp(lowest - max) = 0 to every
      // sum: skip them.
      const int last = a.kind == MaskKind::Causal ? std::min(Lk, i + offset + 1) : Lk;
      float* sc = row.data() + (has_sink ? 1 : 0);
      int j = 0;
#if defined(__x86_64__)
      if (wide) {
        for (; j + 16 <= last; j += 16) {
          scores16_avx512(qs.data(), kt.data() + static_cast<size_t>(j / 16) * D * 16, D, sc + j);
        }
      }
#endif
      for (; j < last; j++) {
        const float* kj = kbase + j * kstride;
        float s = 0.0f;
        for (int k = 0; k < D; k++) s = s + qs[k] * kj[k];
        sc[j] = s;
      }
      if (dt != mx::float32) {
        for (int jj = 0; jj < last; jj++) sc[jj] = rounded(dt, sc[jj]);
      }
      if (a.kind == MaskKind::Bool || a.kind == MaskKind::Additive) {
        const int mh = mv->shape[1] == 1 ? 0 : h;
        const int mb = mv->shape[0] == 1 ? 0 : b;
        const int mi = mv->shape[2] == 1 ? 0 : i;
        for (int jj = 0; jj < last; jj++) {
          const size_t mo = mv->at(mb, mh, mi, mv->shape[3] == 1 ? 0 : jj);
          if (a.kind == MaskKind::Bool) {
            if (!a.mask->data<bool>()[mo]) sc[jj] = fill;
          } else {
            sc[jj] = rounded(dt, sc[jj] + to_float(a.mask->data<void>(), dt, mo));
          }
        }
      }
      // Softmax as MLX's CPU kernel (float accumulation for half types):
      // max, exp(x - max), sum, then exp(x - max) * (1 / sum) in the dtype.
      const int n = last + (has_sink ? 1 : 0);
      if (has_sink) row[0] = to_float(a.sinks->data<void>(), dt, offset_of(*a.sinks, h));
      simd::Simd<float, 1> vmax(-std::numeric_limits<float>::infinity());
      for (int t = 0; t < n; t++) vmax = simd::maximum(simd::Simd<float, 1>(row[t]), vmax);
      const float mxv = vmax.value;
      float sum = 0.0f;
      for (int t = 0; t < n; t++) {
        row[t] = simd::exp(simd::Simd<float, 1>(row[t]) - mxv).value;
        sum = sum + row[t];
      }
      const float norm = 1 / sum;
      for (int t = 0; t < n; t++) row[t] = rounded(dt, row[t] * norm);
      // out = p @ v, each output summed over keys in order from zero.
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int jj = 0; jj < last; jj++) {
        const float p = sc[jj];
        const float* vj = vbase + jj * vstride;
#if defined(__x86_64__)
        if (wide_v) {
          axpy_avx512(p, vj, Dv, acc.data());
          continue;
        }
#endif
        for (int d = 0; d < Dv; d++) acc[d] = acc[d] + p * vj[d];
      }
      const size_t o = ((static_cast<size_t>(b) * Hq + h) * Lq + i) * Dv;
      for (int d = 0; d < Dv; d++) store(a.out, dt, o + d, acc[d]);
    }
  }
}

class CpuAttention : public mx::UnaryPrimitive {
 public:
  CpuAttention(mx::Stream s, float scale, MaskKind kind, bool has_sinks)
      : mx::UnaryPrimitive(s), scale_(scale), kind_(kind), has_sinks_(has_sinks) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    out.set_data(mx::allocator::malloc(out.nbytes()));
    auto& enc = mx::cpu::get_command_encoder(stream());
    for (auto& a : inputs) enc.set_input_array(a);
    enc.set_output_array(out);
    Attn a{inputs[0], inputs[1], inputs[2], std::nullopt, std::nullopt, kind_, scale_, nullptr};
    size_t next = 3;
    if (kind_ == MaskKind::Bool || kind_ == MaskKind::Additive) a.mask = inputs[next++];
    if (has_sinks_) a.sinks = inputs[next++];
    enc.dispatch([a, out]() mutable {
      a.out = out.data<void>();
      const int B = a.q.shape(0), Hkv = a.k.shape(1);
      const Isa isa = detect_isa();
      parallel_run(B * Hkv, [&](int p) { attend(a, p / Hkv, p % Hkv, isa); });
    });
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("famlx's CPU attention runs on CPU streams only");
  }
  const char* name() const override {
    return "FamlxCpuAttention";
  }
  bool is_equivalent(const mx::Primitive& other) const override {
    auto& o = static_cast<const CpuAttention&>(other);
    return scale_ == o.scale_ && kind_ == o.kind_ && has_sinks_ == o.has_sinks_;
  }
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override {
    return {{inputs[0].shape(0), inputs[0].shape(1), inputs[0].shape(2), inputs[2].shape(3)}};
  }

 private:
  float scale_;
  MaskKind kind_;
  bool has_sinks_;
};

}  // namespace

std::optional<mx::array> cpu_rope(const mx::array& x, int dims, bool traditional, std::optional<float> base,
                                  float scale, const mx::array& offset, const std::optional<mx::array>& freqs) {
  const bool off = env_is("FAMLX_CPU_ROPE", "mlx");
  mx::Stream s = mx::default_stream(mx::default_device());
  if (off || s.device != mx::Device::cpu || !is_float(x.dtype()) || x.ndim() < 3 || x.ndim() > 4) {
    return std::nullopt;
  }
  if (dims <= 0 || dims % 2 != 0 || dims > x.shape(-1) || base.has_value() == freqs.has_value()) return std::nullopt;
  if (offset.dtype() != mx::int32 || offset.ndim() > 1 || (offset.size() != 1 && offset.size() != static_cast<size_t>(x.shape(0)))) {
    return std::nullopt;
  }
  std::vector<mx::array> in{x, offset};
  if (freqs) {
    if (freqs->ndim() != 1 || freqs->shape(0) != dims / 2) return std::nullopt;
    in.push_back(mx::astype(*freqs, mx::float32, s));
  }
  return mx::array(x.shape(), x.dtype(),
                   std::make_shared<CpuRope>(s, dims, traditional, base.value_or(1.0f), scale, freqs.has_value()), in);
}

std::optional<mx::array> cpu_attention(const mx::array& q, const mx::array& k, const mx::array& v, float scale,
                                       const std::string& mask_mode, const std::optional<mx::array>& mask,
                                       const std::optional<mx::array>& sinks) {
  const bool off = env_is("FAMLX_CPU_SDPA", "mlx");
  mx::Stream s = mx::default_stream(mx::default_device());
  if (off || s.device != mx::Device::cpu) return std::nullopt;
  for (auto* a : {&q, &k, &v}) {
    if (!is_float(a->dtype()) || a->dtype() != q.dtype() || a->ndim() != 4) return std::nullopt;
  }
  const int Hq = q.shape(1), Hkv = k.shape(1);
  if (q.shape(0) != k.shape(0) || k.shape(0) != v.shape(0) || Hkv != v.shape(1) || Hkv == 0 || Hq % Hkv != 0 ||
      q.shape(3) != k.shape(3) || k.shape(2) != v.shape(2)) {
    return std::nullopt;
  }
  MaskKind kind = MaskKind::None;
  std::vector<mx::array> in{q, k, v};
  if (mask_mode == "causal") {
    if (mask || q.shape(2) > k.shape(2)) return std::nullopt;
    kind = MaskKind::Causal;
  } else if (mask) {
    if (mask->ndim() > 4) return std::nullopt;
    if (mask->dtype() == mx::bool_) {
      kind = MaskKind::Bool;
    } else if (mask->dtype() == q.dtype()) {
      kind = MaskKind::Additive;
    } else {
      return std::nullopt;
    }
    mx::Shape ms{q.shape(0), Hq, q.shape(2), k.shape(2)};
    try {
      in.push_back(mx::broadcast_to(*mask, ms, s));
    } catch (const std::exception&) {
      return std::nullopt;
    }
  } else if (mask_mode != "" && mask_mode != "array") {
    return std::nullopt;
  }
  if (sinks) {
    if (sinks->dtype() != q.dtype() || sinks->ndim() != 1 || sinks->shape(0) != Hq) return std::nullopt;
    in.push_back(*sinks);
  }
  mx::Shape shape{q.shape(0), Hq, q.shape(2), v.shape(3)};
  return mx::array(shape, q.dtype(), std::make_shared<CpuAttention>(s, scale, kind, sinks.has_value()), in);
}

}  // namespace famlx
