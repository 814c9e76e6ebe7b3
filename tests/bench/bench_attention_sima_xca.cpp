// Forward + backward time of the fused SimA and XCA cores, next to the same formulas
// composed from core ops, at the shapes of the paper's Table 3 (REFERENCE.md §5).
//
//   build/bin/bench_attention_sima_xca [B]     (default B = 8; h = 8)
// Median of 5 after two warm-up runs; run with OMP_NUM_THREADS=1 and =2 for the speed-up.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "core/ops.h"
#include "core/parallel.h"
#include "nn/attention/sima.h"
#include "nn/attention/xca.h"

using namespace sima;

static double median_ms(const std::function<void()>& f, int reps = 5) {
  f();
  f();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int main(int argc, char** argv) {
  const int64_t B = argc > 1 ? std::atoll(argv[1]) : 8, h = 8;
  std::printf("B=%lld h=%lld, %d threads; ms for forward + backward (forward only)\n", (long long)B,
              (long long)h, num_threads());
  for (auto [N, d] : {std::pair<int64_t, int64_t>{256, 64}, {64, 32}}) {
    Tensor q = randn({B, h, N, d}).requires_grad_(), k = randn({B, h, N, d}).requires_grad_(),
           v = randn({B, h, N, d}).requires_grad_(), tau = ones({h, 1, 1}).requires_grad_();
    Tensor gy = randn({B, h, N, d});
    auto row = [&](const char* name, const std::function<Tensor()>& f) {
      double fb = median_ms([&] { f().backward(gy); });
      double fw = median_ms([&] { NoGradGuard ng; f(); });
      std::printf("N=%-4lld d=%-3lld %-28s %8.2f (%.2f)\n", (long long)N, (long long)d, name, fb, fw);
    };
    row("sima qk_first", [&] { return sima_attention(q, k, v, SimaNorm::L1, SimaOrder::QkFirst); });
    row("sima kv_first", [&] { return sima_attention(q, k, v, SimaNorm::L1, SimaOrder::KvFirst); });
    row("sima kv_first composed", [&] {
      auto nq = div(q, clamp_min(sum(abs(q), {2}, true), 1e-12f));
      auto nk = div(k, clamp_min(sum(abs(k), {2}, true), 1e-12f));
      return matmul(nq, matmul(nk, v, true, false));
    });
    row("xca", [&] { return xca_attention(q, k, v, tau); });
    row("xca composed", [&] {
      Tensor qt = normalize(transpose(q, 2, 3), 2.f, -1), kt = normalize(transpose(k, 2, 3), 2.f, -1);
      Tensor a = softmax(mul(matmul(qt, kt, false, true), tau), -1);
      return transpose(matmul(a, transpose(v, 2, 3)), 2, 3);
    });
  }
}
