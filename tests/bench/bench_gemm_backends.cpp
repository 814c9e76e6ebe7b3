// bench_gemm_backends: oneDNN's dnnl_sgemm against OpenBLAS's cblas_sgemm, each single-threaded
// as sima::gemm calls them (core/ops/gemm.h), on the products of the study's models at batch 128
// (configs/paper/: DeiT 64 wide, XCiT 48 wide, CvT 16/32/64) and of the DeiT-Tiny-style model
// tests/bench/compare_pytorch.py times (192 wide, batch 64): projections, MLPs, their weight and
// input gradients, and the per-head attention products (with the small ones of claim 5's
// variants: the pseudo-inverse iterations of Nystromformer, 10 landmarks, and SOFT, 9, and
// Performer's random features, int(16 ln 16) = 44). The two libraries alternate on the same
// buffers; each time is the median over the runs. Products within small_gemm's limit (every
// size <= 64, core/ops/small_gemm.h) are timed with it too, in the same rounds.
//
//   OMP_NUM_THREADS=1 ./build/bin/bench_gemm_backends [reps]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench_timing.h"
#include "core/ops/gemm.h"
#include "core/ops/small_gemm.h"
#include "core/tensor.h"

using namespace sima;
using bench_timing::median;
using bench_timing::now_ms;

namespace {

struct Shape3 {
  const char* name;
  bool ta, tb;
  int64_t m, n, k;
};

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 15;
  // Batch 128 of 28×28 images in 4×4 patches: 49 tokens (50 with DeiT's class token).
  const int64_t R = 128 * 50;
  const Shape3 shapes[] = {
      {"DeiT 64 qkv: x W^T", false, true, R, 192, 64},     {"DeiT 64 fc1: x W^T", false, true, R, 256, 64},
      {"DeiT 64 fc2: x W^T", false, true, R, 64, 256},     {"DeiT 64 qkv dW: g^T x", true, false, 192, 64, R},
      {"DeiT 64 fc1 dx: g W", false, false, R, 64, 256},  {"DeiT head: q k^T (50x16)", false, true, 50, 50, 16},
      {"DeiT head: (q k^T) v", false, false, 50, 16, 50},  {"DeiT head: k^T v (SimA)", true, false, 16, 16, 50},
      {"Nystrom pinv: K Z (10x10)", false, false, 10, 10, 10}, {"SOFT pinv: K Z (9x9)", false, false, 9, 9, 9},
      {"Performer: q' (k'^T v)", false, false, 50, 16, 44},
      {"XCiT 48 qkv: x W^T", false, true, 128 * 49, 144, 48},
      {"XCiT head: qh^T kh (12x12)", true, false, 12, 12, 49},
      {"CvT stage-1 embed (im2col)", false, true, 128 * 49, 16, 49},
      // DeiT-Tiny-style (192 wide, 3 heads, 65 tokens, batch 64): compare_pytorch.py's model.
      {"DeiT-Tiny qkv: x W^T", false, true, 64 * 65, 576, 192},
      {"DeiT-Tiny fc1: x W^T", false, true, 64 * 65, 768, 192},
      {"DeiT-Tiny fc2: x W^T", false, true, 64 * 65, 192, 768},
      {"DeiT-Tiny fc1 dW: g^T x", true, false, 768, 192, 64 * 65},
      {"DeiT-Tiny fc2 dx: g W", false, false, 64 * 65, 768, 192},
      {"DeiT-Tiny head: q k^T", false, true, 65, 65, 64},
  };
  std::printf("reps: %d (median), single-threaded calls\n", reps);
  std::printf("%-28s %7s %6s %6s %10s %10s %7s %10s\n", "product", "m", "n", "k", "oneDNN us", "OpenBLAS us", "ratio",
              "small us");
  double tot[2] = {0, 0};
  for (const Shape3& s : shapes) {
    Tensor a = randn({s.ta ? s.k : s.m, s.ta ? s.m : s.k}), b = randn({s.tb ? s.n : s.k, s.tb ? s.k : s.n});
    Tensor c = empty({s.m, s.n});
    // Enough calls per timed run for ~2 ms, so the small head products are not timer noise.
    const int64_t calls = std::max<int64_t>(1, int64_t(2e6 / double(s.m * s.n * s.k) * 20));
    auto run = [&](GemmBackend g) {
      const double t0 = now_ms();
      for (int64_t i = 0; i < calls; ++i)
        detail::sgemm_with(g, s.ta, s.tb, s.m, s.n, s.k, a.data(), s.ta ? s.m : s.k, b.data(), s.tb ? s.k : s.n,
                           0.f, c.data(), s.n);
      return (now_ms() - t0) * 1e3 / double(calls);  // microseconds per call
    };
    const bool small = s.m <= kSmallGemmMax && s.n <= kSmallGemmMax && s.k <= kSmallGemmMax;
    auto run_small = [&] {
      const double t0 = now_ms();
      for (int64_t i = 0; i < calls; ++i)
        small_gemm(s.ta, s.tb, s.m, s.n, s.k, a.data(), b.data(), 0.f, c.data());
      return (now_ms() - t0) * 1e3 / double(calls);
    };
    run(GemmBackend::OneDnn), run(GemmBackend::OpenBlas);  // warm-up (oneDNN's JIT, caches)
    std::vector<double> t[3];
    for (int r = 0; r < reps; ++r) {
      t[0].push_back(run(GemmBackend::OneDnn));
      t[1].push_back(run(GemmBackend::OpenBlas));
      if (small) t[2].push_back(run_small());
    }
    const double d = median(t[0]), o = median(t[1]);
    tot[0] += d, tot[1] += o;
    std::printf("%-28s %7ld %6ld %6ld %10.2f %10.2f %6.2fx", s.name, long(s.m), long(s.n), long(s.k), d, o, o / d);
    if (small)
      std::printf(" %10.2f\n", median(t[2]));
    else
      std::printf(" %10s\n", "-");
  }
  std::printf("%-28s %21s %10.2f %10.2f %6.2fx\n", "sum", "", tot[0], tot[1], tot[1] / tot[0]);
}
