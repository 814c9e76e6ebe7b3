// Forward and forward+backward time of one attention core (everything between qkv
// and proj) for every variant, at the shapes of the paper's Table 3:
//   (B=8, N=256, d=64, h=8) and (B=8, N=64, C=256, h=8).
//
//   build/bin/bench_attention [variant ...]      (default: all variants)
// (sima-bench attention times the whole block, qkv and proj included.)
// Median of 7 after two warm-up runs, as ratios to softmax. Compare with PyTorch:
//   /usr/bin/python3 tests/bench/bench_attention_torch.py --threads T
// run right after with OMP_NUM_THREADS=T (the machine is shared: compare ratios).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/ops.h"
#include "core/parallel.h"
#include "nn/attention/attention.h"
#include "nn/attention/variants.h"
#include "train/bench/benchmark.h"

using namespace sima;

int main(int argc, char** argv) {
  std::vector<std::string> variants = attention_variant_names();  // every row of the table
  if (argc > 1) variants.assign(argv + 1, argv + argc);
  std::printf("%d threads; one attention core, ms (median of 7)\n", num_threads());
  struct S { int64_t B, N, C, h, H, W; };
  for (S s : {S{8, 256, 512, 8, 16, 16}, S{8, 64, 256, 8, 8, 8}}) {
    const int64_t d = s.C / s.h;
    std::printf("\nB=%lld N=%lld C=%lld h=%lld d=%lld\n", (long long)s.B, (long long)s.N, (long long)s.C,
                (long long)s.h, (long long)d);
    std::printf("%-12s %10s %10s %12s %12s %14s\n", "variant", "fwd", "fwd+bwd", "fwd/softmax",
                "f+b/softmax", "exp per image");
    double ref_f = 0, ref_fb = 0;
    for (const std::string& name : variants) {
      AttentionOptions opt;
      opt.variant = name;
      opt.dim = s.C;
      opt.num_heads = s.h;
      auto attn = make_attention(opt);
      Tensor q = randn({s.B, s.h, s.N, d}), k = randn({s.B, s.h, s.N, d}), v = randn({s.B, s.h, s.N, d});
      if (attention_variant(name).traits.shares_qk) k = q;  // SOFT shares q = k
      Tensor gy = randn({s.B, s.h, s.N, d});
      for (Tensor* t : {&q, &k, &v}) t->requires_grad_();
      double f = median_ms([&] {
        NoGradGuard ng;
        attn->core(q, k, v, s.H, s.W);
      });
      attn->reset_exp_calls();
      {
        NoGradGuard ng;
        attn->core(q, k, v, s.H, s.W);
      }
      int64_t exps = attn->exp_calls() / s.B;
      double fb = median_ms([&] {
        for (Tensor* t : {&q, &k, &v}) t->zero_grad();
        attn->core(q, k, v, s.H, s.W).backward(gy);
      });
      if (name == "softmax") ref_f = f, ref_fb = fb;
      std::printf("%-12s %10.3f %10.3f %12.2f %12.2f %14lld\n", name.c_str(), f, fb, ref_f ? f / ref_f : 0.0,
                  ref_fb ? fb / ref_fb : 0.0, (long long)exps);
    }
  }
  return 0;
}
