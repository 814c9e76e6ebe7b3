// A process-wide count of the floating-point operations done in GEMMs (2·m·n·k per
// product: every matmul, linear and im2col convolution goes through gemm.h). Benchmarks
// read it around a training step to report achieved GFLOP/s; the elementwise ops, norms
// and depthwise convolutions are not counted (they are a few percent of a step's FLOPs).
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

}  // namespace sima
