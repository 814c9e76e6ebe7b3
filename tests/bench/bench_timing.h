// Timing helpers shared by the micro-benchmarks in tests/bench/ (bench_*.cpp).
#pragma once
#include <algorithm>
#include <chrono>
#include <vector>

namespace sima::bench_timing {

// Milliseconds on the steady clock (differences only).
inline double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

// The median of v (the mean of the middle two for an even count); v must not be empty.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace sima::bench_timing
