// OpenMP helpers. Loops below a size threshold run serially: starting a
// parallel region costs a few microseconds, more than a small loop takes.
//
// Two thread counts. num_threads() is the count the user asked for (OMP_NUM_THREADS or
// set_num_threads): it alone fixes how work is cut into chunks, so results are bit-for-bit
// the same whatever the number of threads that actually run them. team_threads() is that
// number: num_threads(), or fewer while the thread governor (core/thread_governor.h) finds
// cores taken by other processes. With a smaller team each thread runs several chunks.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "core/thread_governor.h"

namespace sima {

// Minimum work (in elements) per thread before a loop is split.
constexpr int64_t kGrainElementwise = 32768;  // cheap elementwise ops (add, mul, relu)
constexpr int64_t kGrainTranscendental = 4096;  // exp, erf, tanh ... per element

// Items per parallel_for chunk so that a chunk holds about `target` units of work when one
// item costs `work_per_item` (at least one item): grain_for(kGemmGrain, N * N * d).
inline int64_t grain_for(int64_t target, int64_t work_per_item) {
  return std::max<int64_t>(1, target / std::max<int64_t>(1, work_per_item));
}

namespace detail {
inline int& requested_threads() {  // per thread, like OpenMP's own count; 0 = not read yet
  thread_local int n = 0;
  return n;
}
inline int& serial_chunk_depth() {  // > 0 while this thread runs a chunk outside a team
  thread_local int depth = 0;
  return depth;
}
}  // namespace detail

// The requested thread count: how many chunks work is cut into.
inline int num_threads() {
  int& n = detail::requested_threads();
  if (n == 0) n = omp_get_max_threads();
  return n;
}
// Sets both the requested count and the team (OpenMP's count, which OpenBLAS follows too).
inline void set_num_threads(int n) {
  detail::requested_threads() = std::max(1, n);
  omp_set_num_threads(std::max(1, n));
}
// Threads that run the chunks now: never more than requested.
inline int team_threads() { return std::min(num_threads(), omp_get_max_threads()); }
// Inside a chunk (of a team, or run serially in its place): nested loops run serially.
inline bool in_parallel() { return omp_in_parallel() || detail::serial_chunk_depth() > 0; }

// Runs g(c) for every chunk c in [0, chunks): on a team of team_threads() (static schedule:
// one chunk per thread when the team is complete), or one after another on this thread.
// Either way a chunk sees in_parallel(), so what it does never depends on the team.
template <class G>
void run_chunks(int64_t chunks, G&& g) {
  govern_threads();  // may resize the team (only on the thread that enabled the governor)
  const int team = static_cast<int>(std::min<int64_t>(chunks, team_threads()));
  if (team <= 1) {
    ++detail::serial_chunk_depth();
    for (int64_t c = 0; c < chunks; ++c) g(c);
    --detail::serial_chunk_depth();
    return;
  }
#pragma omp parallel for schedule(static) num_threads(team)
  for (int64_t c = 0; c < chunks; ++c) g(c);
}

// Calls f(begin, end) on disjoint chunks covering [0, n): one chunk per requested thread,
// at most n / grain chunks, serially when that is one chunk or when already inside a
// parallel region. Chunks are fixed by (n, grain, num_threads()), so results are bit-for-bit
// reproducible at a given requested thread count, whatever the team that runs them.
template <class F>
void parallel_for(int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  if (in_parallel()) {
    f(int64_t(0), n);
    return;
  }
  const int64_t max_chunks = std::max<int64_t>(1, n / std::max<int64_t>(1, grain));
  const int64_t chunks = std::min<int64_t>(num_threads(), max_chunks);
  if (chunks <= 1) {
    f(int64_t(0), n);
    return;
  }
  run_chunks(chunks, [&](int64_t c) { f(n * c / chunks, n * (c + 1) / chunks); });
}

}  // namespace sima
