#include "cpu_pool.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace famlx {
namespace {

inline void relax() {
#if defined(__x86_64__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// The ticket packs the call's number (24 bits), its part count (20 bits) and
// the next part to take (20 bits): a worker takes a part with one
// compare-exchange that fails once the call is over.
constexpr uint64_t kPartBits = 20;
constexpr uint64_t kPartMask = (1ull << kPartBits) - 1;

class Pool {
 public:
  explicit Pool(int workers) {
    for (int i = 0; i < workers; i++) threads_.emplace_back([this] { work(); });
  }

  ~Pool() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  void run(int parts, const std::function<void(int)>& f) {
    std::lock_guard<std::mutex> serial(call_mu_);
    task_ = &f;
    finished_.store(0, std::memory_order_relaxed);
    call_ = (call_ + 1) & 0xFFFFFF;
    ticket_.store((call_ << (2 * kPartBits)) | (static_cast<uint64_t>(parts) << kPartBits));
    if (sleeping_.load() > 0) {
      std::lock_guard<std::mutex> l(mu_);
      cv_.notify_all();
    }
    int p;
    while ((p = take()) >= 0) {
      f(p);
      finished_.fetch_add(1, std::memory_order_release);
    }
    simd_cleanup();
    while (finished_.load(std::memory_order_acquire) < parts) relax();
  }

 private:
  // A part of the current call, or -1 when none is left.
  int take() {
    uint64_t t = ticket_.load();
    for (;;) {
      const uint64_t next = t & kPartMask, parts = (t >> kPartBits) & kPartMask;
      if (next >= parts) return -1;
      if (ticket_.compare_exchange_weak(t, t + 1)) return static_cast<int>(next);
    }
  }

  void work() {
    using clock = std::chrono::steady_clock;
    auto idle_since = clock::now();
    for (;;) {
      int p = take();
      if (p >= 0) {
        (*task_)(p);
        simd_cleanup();
        finished_.fetch_add(1, std::memory_order_release);
        idle_since = clock::now();
        continue;
      }
      // Spin for a while (kernels come in bursts), then sleep.
      static const int spin_us = [] {
        const char* v = std::getenv("FAMLX_CPU_SPIN_US");
        return v ? std::atoi(v) : 0;
      }();
      if (clock::now() - idle_since < std::chrono::microseconds(spin_us)) {
        for (int i = 0; i < 64; i++) relax();
        continue;
      }
      std::unique_lock<std::mutex> l(mu_);
      sleeping_.fetch_add(1);
      const uint64_t seen = ticket_.load();
      cv_.wait(l, [&] { return stop_ || ticket_.load() != seen; });
      sleeping_.fetch_sub(1);
      if (stop_) return;
      idle_since = clock::now();
    }
  }

  std::vector<std::thread> threads_;
  std::mutex call_mu_, mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> ticket_{0};
  std::atomic<int> finished_{0};
  std::atomic<int> sleeping_{0};
  const std::function<void(int)>* task_ = nullptr;
  uint64_t call_ = 0;
  bool stop_ = false;
};

#if defined(__x86_64__)
__attribute__((target("avx512f"))) void clean_avx512() {
  // EVEX writes to xmm16-31 zero their upper bits; vzeroupper does 0-15.
  asm volatile(
      "vpxord %%xmm16, %%xmm16, %%xmm16\n"
      "vpxord %%xmm17, %%xmm17, %%xmm17\n"
      "vpxord %%xmm18, %%xmm18, %%xmm18\n"
      "vpxord %%xmm19, %%xmm19, %%xmm19\n"
      "vpxord %%xmm20, %%xmm20, %%xmm20\n"
      "vpxord %%xmm21, %%xmm21, %%xmm21\n"
      "vpxord %%xmm22, %%xmm22, %%xmm22\n"
      "vpxord %%xmm23, %%xmm23, %%xmm23\n"
      "vpxord %%xmm24, %%xmm24, %%xmm24\n"
      "vpxord %%xmm25, %%xmm25, %%xmm25\n"
      "vpxord %%xmm26, %%xmm26, %%xmm26\n"
      "vpxord %%xmm27, %%xmm27, %%xmm27\n"
      "vpxord %%xmm28, %%xmm28, %%xmm28\n"
      "vpxord %%xmm29, %%xmm29, %%xmm29\n"
      "vpxord %%xmm30, %%xmm30, %%xmm30\n"
      "vpxord %%xmm31, %%xmm31, %%xmm31\n"
      "vzeroupper" ::
          : "xmm16","xmm17","xmm18","xmm19","xmm20","xmm21","xmm22","xmm23","xmm24","xmm25","xmm26","xmm27","xmm28","xmm29","xmm30","xmm31");
}

__attribute__((target("avx"))) void clean_avx() {
  asm volatile("vzeroupper");
}
#endif

}  // namespace

void simd_cleanup() {
#if defined(__x86_64__)
  static const int level = __builtin_cpu_supports("avx512f") ? 2 : __builtin_cpu_supports("avx") ? 1 : 0;
  if (level == 2) {
    clean_avx512();
  } else if (level == 1) {
    clean_avx();
  }
#endif
}

int cpu_threads() {
  static const int n = [] {
    if (const char* v = std::getenv("FAMLX_CPU_THREADS")) {
      const int t = std::atoi(v);
      if (t >= 1) return t;
    }
    const int hw = static_cast<int>(std::thread::hardware_concurrency());
    return hw < 1 ? 1 : (hw > 16 ? 16 : hw);
  }();
  return n;
}

void parallel_run(int parts, const std::function<void(int)>& f) {
  if (parts <= 0) return;
  if (parts == 1 || cpu_threads() == 1) {
    for (int p = 0; p < parts; p++) f(p);
    simd_cleanup();
    return;
  }
  // Never destroyed: workers may still spin when the process exits.
  static Pool* pool = new Pool(cpu_threads() - 1);
  pool->run(parts, f);
}

}  // namespace famlx
