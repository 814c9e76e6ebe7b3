// OpenMP helpers. Loops below a size threshold run serially: starting a
// parallel region costs a few microseconds, more than a small loop takes.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace sima {

// Minimum work (in elements) per thread before a loop is split.
constexpr int64_t kGrainElementwise = 32768;  // cheap elementwise ops (add, mul, relu)
constexpr int64_t kGrainTranscendental = 4096;  // exp, erf, tanh ... per element

// Items per parallel_for chunk so that a chunk holds about `target` units of work when one
// item costs `work_per_item` (at least one item): grain_for(kGemmGrain, N * N * d).
inline int64_t grain_for(int64_t target, int64_t work_per_item) {
  return std::max<int64_t>(1, target / std::max<int64_t>(1, work_per_item));
}

inline int num_threads() { return omp_get_max_threads(); }
inline void set_num_threads(int n) { omp_set_num_threads(std::max(1, n)); }

// Calls f(begin, end) on disjoint chunks covering [0, n): one chunk per thread,
// at most n / grain chunks, serially when that is one chunk or when already
// inside a parallel region. Chunks are fixed by (n, grain, threads), so results
// are bit-for-bit reproducible at a given thread count.
template <class F>
void parallel_for(int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  int64_t max_chunks = std::max<int64_t>(1, n / std::max<int64_t>(1, grain));
  int64_t chunks = std::min<int64_t>(num_threads(), max_chunks);
  if (chunks <= 1 || omp_in_parallel()) {
    f(int64_t(0), n);
    return;
  }
#pragma omp parallel num_threads(static_cast<int>(chunks))
  {
    int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    int64_t begin = n * t / nt, end = n * (t + 1) / nt;
    if (begin < end) f(begin, end);
  }
}

}  // namespace sima
