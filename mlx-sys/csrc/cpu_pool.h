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

}  // namespace famlx
