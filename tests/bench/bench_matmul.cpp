// bench_matmul: sima::matmul / sima::linear against a direct cblas_sgemm on the same
// buffers, to show the op adds nothing to the BLAS call. Median of several repetitions
// after a warm-up; op and direct runs alternate so machine noise hits both alike.
//
//   ./build/bin/bench_matmul [reps]
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "bench_timing.h"
#include "core/ops.h"
#include "core/parallel.h"

using namespace sima;
using bench_timing::median;
using bench_timing::now_ms;

namespace {

// Times op() and direct() alternately: 2 warm-up runs each, then `reps` timed runs each.
void bench(const char* name, double flops, int reps, const std::function<void()>& op,
           const std::function<void()>& direct) {
  for (int i = 0; i < 2; ++i) {
    op();
    direct();
  }
  std::vector<double> t_op, t_direct;
  for (int i = 0; i < reps; ++i) {
    double t0 = now_ms();
    op();
    double t1 = now_ms();
    direct();
    double t2 = now_ms();
    t_op.push_back(t1 - t0);
    t_direct.push_back(t2 - t1);
  }
  double a = median(t_op), b = median(t_direct);
  std::printf("%-44s %9.3f %9.3f %7.3f %8.1f\n", name, a, b, a / b, flops / (a * 1e6));
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 15;
  NoGradGuard no_grad;
  std::printf("threads: %d, reps: %d (median)\n", num_threads(), reps);
  std::printf("%-44s %9s %9s %7s %8s\n", "case", "op ms", "sgemm ms", "ratio", "GFLOP/s");

  {  // 1024 x 1024 x 1024
    const int n = 1024;
    Tensor a = randn({n, n}), b = randn({n, n}), c = empty({n, n});
    bench("matmul (1024,1024) @ (1024,1024)", 2.0 * n * n * n, reps,
          [&] { Tensor y = matmul(a, b); },
          [&] {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.f, a.data(), n, b.data(),
                        n, 0.f, c.data(), n);
          });
  }
  {  // DeiT-Tiny qkv on CIFAR-sized tokens: 64 images x 65 tokens = 4160 rows, 192 -> 576
    const int B = 64, N = 65, M = B * N, K = 192, Nout = 576;
    const double flops = 2.0 * M * K * Nout;
    Tensor x = randn({B, N, K}), w = randn({K, Nout}), wt = randn({Nout, K}), bias = randn({Nout});
    Tensor c = empty({M, Nout});
    bench("matmul (64,65,192) @ (192,576)", flops, reps, [&] { Tensor y = matmul(x, w); },
          [&] {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, Nout, K, 1.f, x.data(), K,
                        w.data(), Nout, 0.f, c.data(), Nout);
          });
    bench("matmul (64,65,192) @ (576,192).T", flops, reps, [&] { Tensor y = matmul(x, wt, false, true); },
          [&] {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, Nout, K, 1.f, x.data(), K,
                        wt.data(), K, 0.f, c.data(), Nout);
          });
    // linear: the direct call is the bare product x·Wᵀ without the bias.
    bench("linear (64,65,192), W (576,192), b (576)", flops, reps, [&] { Tensor y = linear(x, wt, bias); },
          [&] {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, Nout, K, 1.f, x.data(), K,
                        wt.data(), K, 0.f, c.data(), Nout);
          });
  }
  {  // attention scores q·kᵀ: 64 images x 3 heads of (65, 64): many small matrices, where
     // matmul splits the batch across threads; the direct side is a loop of sgemm calls.
    const int Bh = 64 * 3, N = 65, d = 64;
    Tensor q = randn({64, 3, N, d}), k = randn({64, 3, N, d}), c = empty({Bh, N, N});
    bench("matmul (64,3,65,64) @ (64,3,65,64).T", 2.0 * Bh * N * N * d, reps,
          [&] { Tensor y = matmul(q, k, false, true); },
          [&] {
            for (int i = 0; i < Bh; ++i)
              cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, N, d, 1.f, q.data() + i * N * d, d,
                          k.data() + i * N * d, d, 0.f, c.data() + i * N * N, N);
          });
  }
  return 0;
}
