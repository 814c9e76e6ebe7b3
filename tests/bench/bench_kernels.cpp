// Throughput of the memory-bound kernels (elementwise, activations, layer_norm,
// softmax) in GB/s, next to memcpy moving the same number of bytes.
//
//   build/bin/bench_kernels [rows cols]     (default 12608 x 192: a DeiT-Tiny
//                                             activation, batch 64 x 197 tokens)
// Bytes moved per element: read inputs + write output (add: 12 B, unary: 8 B).
// Run with OMP_NUM_THREADS=1 and =2 to see the parallel speed-up.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <vector>

#include "core/ops.h"
#include "core/parallel.h"

using namespace sima;

static double median_seconds(const std::function<void()>& f, int reps = 15) {
  f();
  f();  // warm-up: caches, allocator, thread pool
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int main(int argc, char** argv) {
  int64_t rows = argc > 2 ? std::atoll(argv[1]) : 12608, cols = argc > 2 ? std::atoll(argv[2]) : 192;
  Tensor a = randn({rows, cols}), b = randn({rows, cols});
  Tensor w = ones({cols}), bias = zeros({cols});
  int64_t n = rows * cols;
  std::printf("shape (%lld, %lld) = %.1f MB per tensor, %d threads\n", (long long)rows,
              (long long)cols, n * 4 / 1e6, num_threads());
  std::printf("%-12s %10s %10s %14s %10s\n", "kernel", "ms", "GB/s", "memcpy GB/s", "ratio");

  auto report = [&](const char* name, double bytes, const std::function<void()>& f) {
    double s = median_seconds(f);
    // memcpy moving the same bytes: bytes/2 copied (one read + one write per byte).
    size_t nb = static_cast<size_t>(bytes / 2);
    std::vector<char> src(nb, 1), dst(nb);
    double sm = median_seconds([&] { std::memcpy(dst.data(), src.data(), nb); });
    std::printf("%-12s %10.3f %10.2f %14.2f %10.2f\n", name, s * 1e3, bytes / s / 1e9, bytes / sm / 1e9,
                (bytes / s) / (bytes / sm));
  };
  double f4 = 4.0 * n;
  std::optional<NoGradGuard> no_grad(std::in_place);
  report("add", 3 * f4, [&] { add(a, b); });
  report("add_bias", 2 * f4, [&] { add(a, bias); });
  report("mul_scalar", 2 * f4, [&] { mul(a, 0.5f); });
  report("relu", 2 * f4, [&] { relu(a); });
  report("gelu", 2 * f4, [&] { gelu(a); });
  report("exp", 2 * f4, [&] { exp(a); });
  report("layer_norm", 2 * f4, [&] { layer_norm(a, w, bias, 1e-6f); });
  report("softmax", 2 * f4, [&] { softmax(a, -1); });
  no_grad.reset();
  // forward and backward: x -> y (8 B), then gy, x -> gx (12 B)
  Tensor xg = a.detach().requires_grad_(), gy = ones({rows, cols});
  report("gelu_fwdbwd", 5 * f4, [&] { gelu(xg).backward(gy); });
  return 0;
}
