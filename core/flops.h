// A process-wide count of the floating-point operations done in GEMMs (2·m·n·k per
// product: every matmul, linear and im2col convolution goes through gemm.h). Benchmarks
// read it around a training step to report achieved GFLOP/s; the elementwise ops, norms
// and depthwise convolutions are not counted (they are a few percent of a step's FLOPs).
// A second count is of the GEMM library's calls (each single-threaded block of gemm.h, and the
// attention cores' per-head products): a model whose step makes many tiny products pays the
// library's cost per call (the iterative pseudo-inverses of Nystromformer and SOFT therefore
// call small_gemm, core/ops/small_gemm.h, whose products count as FLOPs but not as calls).
// A third, the nanoseconds spent inside those calls (summed over threads), is kept only while a
// benchmark turns it on (GemmTiming): off, a call pays one relaxed load for it.
#pragma once
#include <atomic>
#include <cstdint>

namespace sima {

inline std::atomic<int64_t>& gemm_flop_counter() {
  static std::atomic<int64_t> count{0};
  return count;
}
inline void count_gemm_flops(int64_t flops) { gemm_flop_counter().fetch_add(flops, std::memory_order_relaxed); }
inline int64_t gemm_flops() { return gemm_flop_counter().load(std::memory_order_relaxed); }

inline std::atomic<int64_t>& gemm_call_counter() {
  static std::atomic<int64_t> count{0};
  return count;
}
inline void count_gemm_call() { gemm_call_counter().fetch_add(1, std::memory_order_relaxed); }
inline int64_t gemm_calls() { return gemm_call_counter().load(std::memory_order_relaxed); }

inline std::atomic<bool>& gemm_timing_flag() {
  static std::atomic<bool> on{false};
  return on;
}
inline std::atomic<int64_t>& gemm_ns_counter() {
  static std::atomic<int64_t> ns{0};
  return ns;
}
inline bool gemm_timing_on() { return gemm_timing_flag().load(std::memory_order_relaxed); }
inline void count_gemm_ns(int64_t ns) { gemm_ns_counter().fetch_add(ns, std::memory_order_relaxed); }
inline int64_t gemm_ns() { return gemm_ns_counter().load(std::memory_order_relaxed); }

// The GEMM library's time is counted while one of these lives (not nested; benchmarks only).
class GemmTiming {
 public:
  GemmTiming() { gemm_timing_flag().store(true, std::memory_order_relaxed); }
  ~GemmTiming() { gemm_timing_flag().store(false, std::memory_order_relaxed); }
  GemmTiming(const GemmTiming&) = delete;
  GemmTiming& operator=(const GemmTiming&) = delete;
};

}  // namespace sima
