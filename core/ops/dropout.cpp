// dropout and drop_path: multiply by a random mask of 0 and 1/keep, backward by the same mask.
//
// The mask is drawn serially from the generator (one uniform per element, or per sample),
// so a given seed gives the same mask at any thread count; applying it is parallel.
// In eval mode, or with p = 0, both return x itself (no copy, no node), as PyTorch.
#include "core/ops/dropout.h"

#include <algorithm>

#include "core/autograd.h"
#include "core/error.h"
#include "core/parallel.h"

namespace sima {

namespace {

void check_p(const char* op, float p) {
  check(p >= 0.f && p <= 1.f, op, ": probability has to be between 0 and 1, but got ", p);
}

// Element i of y is x[i]·mask[i / group]: group = 1 for dropout, the sample size for drop_path.
// Backward: dx = g·mask (the mask is constant; it already holds the 1/keep scale).
Tensor apply_mask(const char* name, const Tensor& x, const Tensor& mask, int64_t group) {
  Tensor y = empty(x.shape());
  const float *px = x.data(), *pm = mask.data();
  float* py = y.data();
  auto run = [group](const float* a, const float* m, float* out, int64_t n) {
    parallel_for(n, kGrainElementwise, [&](int64_t i0, int64_t i1) {
      if (group == 1)
        for (int64_t i = i0; i < i1; ++i) out[i] = a[i] * m[i];
      else  // runs of one sample share one mask value
        for (int64_t i = i0; i < i1;) {
          const int64_t end = std::min(i1, (i / group + 1) * group);
          const float mv = m[i / group];
          for (; i < end; ++i) out[i] = a[i] * mv;
        }
    });
  };
  run(px, pm, py, x.numel());
  if (needs_grad(x))
    attach_grad_fn(y, name, {x}, [mask, group, run](const Tensor& g) -> Grads {
      Tensor dx = empty(g.shape());
      run(g.data(), mask.data(), dx.data(), g.numel());
      return {dx};
    });
  return y;
}

// mask[i] = 1/keep with probability keep = 1 − p, else 0 (all 0 when p = 1).
Tensor draw_mask(int64_t n, float p, Generator& gen) {
  Tensor mask = empty({n});
  float* pm = mask.data();
  if (p >= 1.f) {  // nothing survives; drawing would only advance the stream
    for (int64_t i = 0; i < n; ++i) pm[i] = 0.f;
    return mask;
  }
  const float scale = 1.f / (1.f - p);
  for (int64_t i = 0; i < n; ++i) pm[i] = gen.uniform() >= p ? scale : 0.f;
  return mask;
}

}  // namespace

// x (any) -> y like x.
Tensor dropout(const Tensor& x, float p, bool training, Generator& gen) {
  check_p("dropout", p);
  if (!training || p == 0.f) return x;
  return apply_mask("dropout", x, draw_mask(x.numel(), p, gen), 1);
}

// x (B, ...) -> y like x; sample b is kept whole (scaled by 1/keep) or zeroed whole.
Tensor drop_path(const Tensor& x, float p, bool training, Generator& gen) {
  check_p("drop_path", p);
  if (!training || p == 0.f) return x;
  check(x.dim() >= 1, "drop_path: input must have a batch dim, got shape ", x.shape());
  const int64_t B = x.size(0);
  return apply_mask("drop_path", x, draw_mask(B, p, gen), B ? x.numel() / B : 1);
}

}  // namespace sima
