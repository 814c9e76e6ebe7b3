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

namespace {

// x (B, C, HW) as C channels of B planes of HW values; at(b, c): the start of plane (b, c).
struct Planes {
  int64_t B, C, HW;
  int64_t at(int64_t b, int64_t c) const { return (b * C + c) * HW; }
};

// out[c] = Σ_b Σ_j f(c, index), per channel in double, the channels in parallel.
template <class F>
void per_channel_sum(const Planes& P, double* out, F f) {
  parallel_for(P.C, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double acc = 0.0;
      for (int64_t b = 0; b < P.B; ++b)
        for (int64_t j = 0; j < P.HW; ++j) acc += f(c, P.at(b, c) + j);
      out[c] = acc;
    }
  });
}

// The global statistics: Σx and the count summed across, then Σ(x − μ)² summed across
// (the table at the top). Fills mean, rstd (C) and the running stats; returns N.
double forward_statistics(const Planes& P, const float* px, float* pm, float* pr, float* prm, float* prv,
                          float momentum, float eps, const SumAcrossFn& sum_across) {
  const int64_t C = P.C;
  std::vector<double> s(size_t(C) + 1, 0.0);
  per_channel_sum(P, s.data(), [&](int64_t, int64_t i) { return double(px[i]); });
  s[size_t(C)] = double(P.B * P.HW);
  sum_across(s.data(), C + 1);
  const double N = s[size_t(C)];
  check(N > 1, "sync_batch_norm: expected more than 1 value per channel over all processes, got ", N);
  for (int64_t c = 0; c < C; ++c) pm[c] = float(s[size_t(c)] / N);
  std::vector<double> v(size_t(C), 0.0);
  per_channel_sum(P, v.data(), [&](int64_t c, int64_t i) {
    const double d = px[i] - s[size_t(c)] / N;
    return d * d;
  });
  sum_across(v.data(), C);
  for (int64_t c = 0; c < C; ++c) {
    pr[c] = float(1.0 / std::sqrt(v[size_t(c)] / N + eps));
    if (prm) {  // unbiased variance for the running stats, as PyTorch
      prm[c] = (1.f - momentum) * prm[c] + momentum * pm[c];
      prv[c] = (1.f - momentum) * prv[c] + momentum * float(v[size_t(c)] / (N - 1));
    }
  }
  return N;
}

// y = (x − μ)·σ⁻¹·w + b per channel (w, b null: 1, 0).
void forward_kernel(const Planes& P, const float* px, const float* pm, const float* pr, const float* pw,
                    const float* pb, float* py) {
  parallel_for(P.C, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const float m = pm[c], rs = pr[c], wc = pw ? pw[c] : 1.f, bc = pb ? pb[c] : 0.f;
      for (int64_t b = 0; b < P.B; ++b)
        for (int64_t j = 0; j < P.HW; ++j) py[P.at(b, c) + j] = (px[P.at(b, c) + j] - m) * rs * wc + bc;
    }
  });
}

// dx = σ⁻¹ (ĝ − mean(ĝ) − x̂ · mean(ĝ·x̂)), ĝ = g·w, its means over all N values from the sums
// [Σg (C), Σg·x̂ (C)] summed across (derivation: docs/derivations.md §2).
void backward_kernel(const Planes& P, const float* px, const float* pg, const float* pm, const float* pr,
                     const float* pw, const double* sums, double N, float* pd) {
  const int64_t C = P.C;
  parallel_for(C, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const float m = pm[c], rs = pr[c], wc = pw ? pw[c] : 1.f;
      const float mg = float(wc * sums[size_t(c)] / N), mgx = float(wc * sums[size_t(C + c)] / N);
      for (int64_t b = 0; b < P.B; ++b)
        for (int64_t j = 0; j < P.HW; ++j) {
          const int64_t i = P.at(b, c) + j;
          pd[i] = rs * (pg[i] * wc - mg - (px[i] - m) * rs * mgx);
        }
    }
  });
}

}  // namespace

Tensor sync_batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                       const Tensor& running_var, float momentum, float eps, const SumAcrossFn& sum_across) {
  check(x.dim() >= 2, "sync_batch_norm: input must be (B, C, H, W) or (B, C), got shape ", x.shape());
  check(static_cast<bool>(sum_across), "sync_batch_norm: no sum_across function");
  const Planes P{x.size(0), x.size(1), prod(x.shape(), 2, x.dim())};
  const int64_t C = P.C;
  for (const Tensor* t : {&weight, &bias, &running_mean, &running_var})
    if (t->defined())
      check(t->shape() == Shape{C}, "sync_batch_norm: a parameter of shape ", t->shape(), " for input of shape ",
            x.shape(), " (expected (", C, "))");
  check(running_mean.defined() == running_var.defined(),
        "sync_batch_norm: running_mean and running_var must be given together");
  Tensor mean = empty({C}), rstd = empty({C});
  const double N = forward_statistics(P, x.data(), mean.data(), rstd.data(),
                                      running_mean.defined() ? running_mean.data() : nullptr,
                                      running_var.defined() ? running_var.data() : nullptr, momentum, eps, sum_across);
  Tensor y = empty(x.shape());
  forward_kernel(P, x.data(), mean.data(), rstd.data(), weight.defined() ? weight.data() : nullptr,
                 bias.defined() ? bias.data() : nullptr, y.data());

  if (needs_grad(x, weight, bias))
    attach_grad_fn(y, "sync_batch_norm", {x, weight, bias},
                   [xs = x.detach(), ws = weight.defined() ? weight.detach() : Tensor(), mean, rstd, N, sum_across, P,
                    rx = x.requires_grad(), rw = weight.requires_grad(),
                    rb = bias.requires_grad()](const Tensor& g) -> Grads {
      // g (B, C, *) -> dx (B, C, *), dw (C), db (C)
      const int64_t C = P.C;
      const float *px = xs.data(), *pg = g.data(), *pm = mean.data(), *pr = rstd.data();
      std::vector<double> sums(size_t(2 * C), 0.0);  // [Σg (C), Σg·x̂ (C)]
      per_channel_sum(P, sums.data(), [&](int64_t, int64_t i) { return double(pg[i]); });
      per_channel_sum(P, sums.data() + C,
                      [&](int64_t c, int64_t i) { return double(pg[i] * (px[i] - pm[c]) * pr[c]); });
      Tensor dw = rw ? empty({C}) : Tensor(), db = rb ? empty({C}) : Tensor();
      for (int64_t c = 0; c < C; ++c) {  // this process's share, before the sum across
        if (rw) dw.data()[c] = float(sums[size_t(C + c)]);
        if (rb) db.data()[c] = float(sums[size_t(c)]);
      }
      sum_across(sums.data(), 2 * C);
      Tensor dx = rx ? empty(xs.shape()) : Tensor();
      if (rx) backward_kernel(P, px, pg, pm, pr, ws.defined() ? ws.data() : nullptr, sums.data(), N, dx.data());
      return {dx, dw, db};
    });
  return y;
}

}  // namespace sima
