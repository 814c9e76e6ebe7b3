// sync_batch_norm: batch_norm2d (training) over the union of every process's batch.
//
// Forward, per channel c, with N = Σ_p B_p·HW the global count:
//   μ = (Σ_p Σ x) / N                          one sum across the processes: [Σx (C), count]
//   σ² = (Σ_p Σ (x − μ)²) / N                  a second one: [Σ(x − μ)² (C)] (two passes, as
//                                              batch_norm2d, rather than Σx² − Nμ²: no cancellation)
//   y = (x − μ)·σ⁻¹·w + b
// Backward. The loss is the sum over processes of each one's loss, so dL/dy of every process
// enters μ and σ: with ĝ = g·w the usual formula (core/ops/norm.cpp)
//   dx = σ⁻¹ (ĝ − mean(ĝ) − x̂ · mean(ĝ·x̂))
// takes its two means over all N values: [Σg (C), Σg·x̂ (C)] summed across, divided by N.
// dw = Σ g·x̂ and db = Σ g stay local: the trainer's gradient averaging sums them.
#include "core/ops/sync_batch_norm.h"

#include <cmath>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/parallel.h"

namespace sima {

Tensor sync_batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                       const Tensor& running_var, float momentum, float eps, const SumAcrossFn& sum_across) {
  check(x.dim() >= 2, "sync_batch_norm: input must be (B, C, H, W) or (B, C), got shape ", x.shape());
  check(static_cast<bool>(sum_across), "sync_batch_norm: no sum_across function");
  const int64_t B = x.size(0), C = x.size(1), HW = prod(x.shape(), 2, x.dim());
  for (const Tensor* t : {&weight, &bias, &running_mean, &running_var})
    if (t->defined())
      check(t->shape() == Shape{C}, "sync_batch_norm: a parameter of shape ", t->shape(), " for input of shape ",
            x.shape(), " (expected (", C, "))");
  check(running_mean.defined() == running_var.defined(),
        "sync_batch_norm: running_mean and running_var must be given together");
  const float* px = x.data();
  auto at = [&](int64_t b, int64_t c) { return (b * C + c) * HW; };  // start of plane (b, c)

  // Σx per channel and the count, summed across the processes.
  std::vector<double> s(size_t(C) + 1, 0.0);
  parallel_for(C, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double acc = 0.0;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < HW; ++j) acc += px[at(b, c) + j];
      s[size_t(c)] = acc;
    }
  });
  s[size_t(C)] = double(B * HW);
  sum_across(s.data(), C + 1);
  const double N = s[size_t(C)];
  check(N > 1, "sync_batch_norm: expected more than 1 value per channel over all processes, got ", N);
  Tensor mean = empty({C}), rstd = empty({C});
  float *pm = mean.data(), *pr = rstd.data();
  for (int64_t c = 0; c < C; ++c) pm[c] = float(s[size_t(c)] / N);
  // Σ(x − μ)² per channel, summed across.
  std::vector<double> v(size_t(C), 0.0);
  parallel_for(C, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const double m = s[size_t(c)] / N;
      double acc = 0.0;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < HW; ++j) {
          const double d = px[at(b, c) + j] - m;
          acc += d * d;
        }
      v[size_t(c)] = acc;
    }
  });
  sum_across(v.data(), C);
  float* prm = running_mean.defined() ? running_mean.data() : nullptr;
  float* prv = running_var.defined() ? running_var.data() : nullptr;
  for (int64_t c = 0; c < C; ++c) {
    pr[c] = float(1.0 / std::sqrt(v[size_t(c)] / N + eps));
    if (prm) {  // unbiased variance for the running stats, as PyTorch
      prm[c] = (1.f - momentum) * prm[c] + momentum * pm[c];
      prv[c] = (1.f - momentum) * prv[c] + momentum * float(v[size_t(c)] / (N - 1));
    }
  }

  Tensor y = empty(x.shape());
  const float *pw = weight.defined() ? weight.data() : nullptr, *pb = bias.defined() ? bias.data() : nullptr;
  float* py = y.data();
  parallel_for(C, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const float m = pm[c], rs = pr[c], wc = pw ? pw[c] : 1.f, bc = pb ? pb[c] : 0.f;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < HW; ++j) py[at(b, c) + j] = (px[at(b, c) + j] - m) * rs * wc + bc;
    }
  });

  if (needs_grad(x, weight, bias))
    attach_grad_fn(y, "sync_batch_norm", {x, weight, bias},
                   [xs = x.detach(), ws = weight.defined() ? weight.detach() : Tensor(), mean, rstd, N, sum_across,
                    rx = x.requires_grad(), rw = weight.requires_grad(),
                    rb = bias.requires_grad()](const Tensor& g) -> Grads {
      // g (B, C, *) -> dx (B, C, *), dw (C), db (C)
      const int64_t B = xs.size(0), C = xs.size(1), HW = prod(xs.shape(), 2, xs.dim());
      auto at = [&](int64_t b, int64_t c) { return (b * C + c) * HW; };
      const float *px = xs.data(), *pg = g.data(), *pw = ws.defined() ? ws.data() : nullptr;
      const float *pm = mean.data(), *pr = rstd.data();
      std::vector<double> sums(size_t(2 * C), 0.0);  // [Σg (C), Σg·x̂ (C)]
      parallel_for(C, 1, [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c) {
          double sg = 0.0, sgx = 0.0;
          for (int64_t b = 0; b < B; ++b)
            for (int64_t j = 0; j < HW; ++j) {
              const float gv = pg[at(b, c) + j];
              sg += gv;
              sgx += gv * (px[at(b, c) + j] - pm[c]) * pr[c];
            }
          sums[size_t(c)] = sg;
          sums[size_t(C + c)] = sgx;
        }
      });
      Tensor dw = rw ? empty({C}) : Tensor(), db = rb ? empty({C}) : Tensor();
      for (int64_t c = 0; c < C; ++c) {  // this process's share, before the sum across
        if (rw) dw.data()[c] = float(sums[size_t(C + c)]);
        if (rb) db.data()[c] = float(sums[size_t(c)]);
      }
      sum_across(sums.data(), 2 * C);
      Tensor dx = rx ? empty(xs.shape()) : Tensor();
      if (rx) {
        float* pd = dx.data();
        parallel_for(C, 1, [&](int64_t c0, int64_t c1) {
          for (int64_t c = c0; c < c1; ++c) {
            const float m = pm[c], rs = pr[c], wc = pw ? pw[c] : 1.f;
            const float mg = float(wc * sums[size_t(c)] / N), mgx = float(wc * sums[size_t(C + c)] / N);
            for (int64_t b = 0; b < B; ++b)
              for (int64_t j = 0; j < HW; ++j) {
                const int64_t i = at(b, c) + j;
                pd[i] = rs * (pg[i] * wc - mg - (px[i] - m) * rs * mgx);
              }
          }
        });
      }
      return {dx, dw, db};
    });
  return y;
}

}  // namespace sima
