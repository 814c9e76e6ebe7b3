// What the ops that call oneDNN share (internal to core/ops): the engine and stream of the
// reduced-precision ops (lowp_gemm.cpp, lowp_conv.cpp, autocast_gemm.cpp), one CPU engine and one
// in-order stream made on first use, and OneOmpThread (gemm_backend.cpp, autocast_gemm.cpp).
#pragma once
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

namespace sima {

struct Dnnl {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream st{eng};
};
Dnnl& dnnl_ctx();

// One OpenMP thread for oneDNN while it lives: dnnl_sgemm (gemm_backend.cpp) threads over
// omp_get_max_threads() when called outside an active parallel region, and may then split the sum
// over k, whose rounding would depend on the team; a bf16 matmul primitive (autocast_gemm.cpp) is
// made and run for the threads of the moment. One thread for a call's duration keeps every block
// single-threaded, also inside a parallel region; the setting is the calling task's own.
class OneOmpThread {
 public:
  OneOmpThread() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~OneOmpThread() { omp_set_num_threads(saved_); }
  OneOmpThread(const OneOmpThread&) = delete;
  OneOmpThread& operator=(const OneOmpThread&) = delete;

 private:
  int saved_;
};

}  // namespace sima
