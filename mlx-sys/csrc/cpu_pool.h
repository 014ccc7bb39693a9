// A small pool of persistent threads for famlx's CPU kernels.
#pragma once

#include <functional>

namespace famlx {

// Threads the CPU kernels use: FAMLX_CPU_THREADS if set (at least 1), else
// the machine's hardware threads, at most 16.
int cpu_threads();

// Runs f(p) for every part p in [0, parts) on the calling thread and the
// pool's workers (parts are taken first come, first served, so a worker that
// is slow to wake costs nothing); returns when all parts are done.
//
// Hand-written rather than a library pool because kernels of a few tens of
// microseconds need workers that spin briefly between calls, and a part
// counter that a late worker can never take from the next call.
void parallel_run(int parts, const std::function<void(int)>& f);

// Leaves the SIMD registers as code compiled for plain x86-64 (SSE) needs
// them: upper halves of ymm/zmm zero, zmm16-31 included (vzeroupper alone
// leaves those). Without it, every SSE instruction after an AVX-512 kernel
// pays a state penalty: MLX's own CPU kernels (built for baseline x86-64)
// and libm ran up to 50x slower after famlx's. No-op elsewhere.
void simd_cleanup();

}  // namespace famlx
