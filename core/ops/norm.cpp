// Normalisation ops: layer_norm, batch_norm2d, normalize. Each is one fused node; the
// backward is written under its forward with the derivation (docs/derivations.md §1, §2, §6).
//
// layer_norm and batch_norm share one gradient. With x̂ = (x − μ)·σ⁻¹ over a group of N
// values (a row for layer_norm, a channel for batch_norm), y = x̂·w + b and ĝ = g·w:
//   dx̂ = ĝ,   dσ⁻¹ / dx = −σ⁻³(x − μ)/N,   dμ/dx = 1/N
//   dx = σ⁻¹ (ĝ − mean(ĝ) − x̂ · mean(ĝ·x̂))
//   dw = Σ g·x̂,   db = Σ g        (summed over the positions sharing that w, b)
#include "core/ops/norm.h"

#include <cmath>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops/lanes.h"
#include "core/parallel.h"

namespace sima {

namespace {

// weight / bias / running stats: undefined, or of shape (C).
void check_param(const char* op, const char* what, const Tensor& t, int64_t C, const Shape& x) {
  if (!t.defined()) return;
  check(t.shape() == Shape{C}, op, ": ", what, " of shape ", t.shape(), " for input of shape ", x,
        " (expected (", C, "))");
}

const float* data_or_null(const Tensor& t) { return t.defined() ? t.data() : nullptr; }

// y[j] = x̂·w + b with x̂ = (x[j] − m)·rs over n values (w, b scalars or per-element).
// Four loops rather than a branch inside one, so each vectorises.
inline void affine_row(const float* x, float* y, int64_t n, float m, float rs, const float* w,
                       const float* b) {
  if (w && b)
    for (int64_t j = 0; j < n; ++j) y[j] = (x[j] - m) * rs * w[j] + b[j];
  else if (w)
    for (int64_t j = 0; j < n; ++j) y[j] = (x[j] - m) * rs * w[j];
  else if (b)
    for (int64_t j = 0; j < n; ++j) y[j] = (x[j] - m) * rs + b[j];
  else
    for (int64_t j = 0; j < n; ++j) y[j] = (x[j] - m) * rs;
}

}  // namespace

// ---- layer_norm ---------------------------------------------------------------

namespace {

// One row of C: its mean and rstd = 1/sqrt(var + eps) into *m, *rs, and y = x̂·w + b.
inline void layer_norm_row(const float* xr, float* yr, int64_t C, float eps, const float* pw, const float* pb,
                           float* m_out, float* rs_out) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t c = 0; c < C; ++c) s += xr[c];
  const float m = s / C;
  float v = 0.f;  // second pass over the (cached) row: no cancellation in E[x²] − μ²
#pragma omp simd reduction(+ : v)
  for (int64_t c = 0; c < C; ++c) v += (xr[c] - m) * (xr[c] - m);
  const float rs = 1.f / std::sqrt(v / C + eps);
  *m_out = m;
  *rs_out = rs;
  affine_row(xr, yr, C, m, rs, pw, pb);
}

// The backward of rows [r0, r1): dx per row (formula at the top of the file) into pdx (null:
// not wanted), and Σ g·x̂, Σ g over those rows added into pdw, pdb (null: not wanted).
void layer_norm_backward_rows(const float* px, const float* pg, const float* pw, const float* pm, const float* pr,
                              int64_t r0, int64_t r1, int64_t C, float* pdx, float* pdw, float* pdb) {
  for (int64_t r = r0; r < r1; ++r) {
    const float *xr = px + r * C, *gr = pg + r * C;
    const float m = pm[r], rs = pr[r];
    if (pdw)
      for (int64_t c = 0; c < C; ++c) {
        pdw[c] += gr[c] * (xr[c] - m) * rs;
        pdb[c] += gr[c];
      }
    if (!pdx) continue;
    float sg = 0.f, sgx = 0.f;  // Σ ĝ, Σ ĝ·x̂
#pragma omp simd reduction(+ : sg, sgx)
    for (int64_t c = 0; c < C; ++c) {
      const float gh = pw ? gr[c] * pw[c] : gr[c];
      sg += gh;
      sgx += gh * (xr[c] - m) * rs;
    }
    const float mg = sg / C, mgx = sgx / C;
    float* dr = pdx + r * C;
    for (int64_t c = 0; c < C; ++c) {
      const float gh = pw ? gr[c] * pw[c] : gr[c];
      dr[c] = rs * (gh - mg - (xr[c] - m) * rs * mgx);
    }
  }
}

}  // namespace

// x (..., C) seen as R rows of C; weight, bias (C) or undefined; y like x.
// Saved for backward: x, weight, and per row mean (R) and rstd = 1/sqrt(var + eps) (R).
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps) {
  check(x.dim() >= 1, "layer_norm: input must have at least one dim, got shape ", x.shape());
  const int64_t C = x.size(-1), R = C ? x.numel() / C : 0;
  check_param("layer_norm", "weight", weight, C, x.shape());
  check_param("layer_norm", "bias", bias, C, x.shape());

  Tensor y = empty(x.shape()), mean = empty({R}), rstd = empty({R});
  const float *px = x.data(), *pw = data_or_null(weight), *pb = data_or_null(bias);
  float *py = y.data(), *pm = mean.data(), *pr = rstd.data();
  parallel_for(R, grain_for(kGrainRows, C), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) layer_norm_row(px + r * C, py + r * C, C, eps, pw, pb, pm + r, pr + r);
  });

  if (needs_grad(x, weight, bias))
    attach_grad_fn(y, "layer_norm", {x, weight, bias},
                   [xs = x.detach(), ws = weight.defined() ? weight.detach() : Tensor(), mean, rstd,
                    rx = x.requires_grad(), rw = weight.requires_grad(),
                    rb = bias.requires_grad()](const Tensor& g) -> Grads {
      // g (R, C) -> dx (R, C), dw (C), db (C) (derivation: docs/derivations.md §1). dw, db
      // are sums over rows: each chunk of rows sums into its own partial row, and the
      // partials are added in a fixed order (deterministic at a given thread count).
      const int64_t C = xs.size(-1), R = C ? xs.numel() / C : 0;
      const bool want_wb = rw || rb;
      const int64_t chunks = std::clamp<int64_t>(R * C / kGrainRows, 1, num_threads());
      Tensor dx = rx ? empty(xs.shape()) : Tensor();
      Tensor part = want_wb ? zeros({chunks, 2, C}) : Tensor();  // [chunk][dw, db][C]
      float* pp = want_wb ? part.data() : nullptr;
      parallel_for(chunks, 1, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
          float *pdw = want_wb ? pp + t * 2 * C : nullptr, *pdb = want_wb ? pdw + C : nullptr;
          layer_norm_backward_rows(xs.data(), g.data(), data_or_null(ws), mean.data(), rstd.data(), R * t / chunks,
                                   R * (t + 1) / chunks, C, rx ? dx.data() : nullptr, pdw, pdb);
        }
      });
      Tensor dw = rw ? zeros({C}) : Tensor(), db = rb ? zeros({C}) : Tensor();
      for (int64_t t = 0; t < (want_wb ? chunks : 0); ++t)
        for (int64_t c = 0; c < C; ++c) {
          if (rw) dw.data()[c] += pp[t * 2 * C + c];
          if (rb) db.data()[c] += pp[t * 2 * C + C + c];
        }
      return {dx, dw, db};
    });
  return y;
}

// ---- batch_norm2d ----------------------------------------------------------------
// batch_norm2d on (N, C) rows (HW = 1: BatchNorm1d, or a channels-last grid flattened):
// the same sums as the per-channel loops below, taken along the rows with all C channels
// side by side (contiguous, vectorised) instead of striding down one column at a time.
// Sums in double, rows in order: the result does not depend on the thread count.
namespace {

Tensor batch_norm_rows(const Tensor& x, const Tensor& weight, const Tensor& bias, float* prm, float* prv,
                       bool training, float momentum, float eps) {
  const int64_t N = x.size(0), C = x.size(1);
  Tensor y = empty(x.shape()), mean = empty({C}), rstd = empty({C});
  const float *px = x.data(), *pw = data_or_null(weight), *pb = data_or_null(bias);
  float *pm = mean.data(), *pr = rstd.data();
  if (training) {
    std::vector<double> s(size_t(C), 0.0), v(size_t(C), 0.0);
    for (int64_t r = 0; r < N; ++r)
      for (int64_t c = 0; c < C; ++c) s[size_t(c)] += px[r * C + c];
    for (int64_t c = 0; c < C; ++c) s[size_t(c)] /= double(N);
    for (int64_t r = 0; r < N; ++r)
      for (int64_t c = 0; c < C; ++c) {
        const double dv = px[r * C + c] - s[size_t(c)];
        v[size_t(c)] += dv * dv;
      }
    for (int64_t c = 0; c < C; ++c) {
      pm[c] = static_cast<float>(s[size_t(c)]);
      pr[c] = static_cast<float>(1.0 / std::sqrt(v[size_t(c)] / double(N) + eps));
      if (prm) {  // running stats take the unbiased variance, as PyTorch
        prm[c] = (1.f - momentum) * prm[c] + momentum * pm[c];
        prv[c] = (1.f - momentum) * prv[c] + momentum * static_cast<float>(v[size_t(c)] / double(N - 1));
      }
    }
  } else {
    for (int64_t c = 0; c < C; ++c) pm[c] = prm[c], pr[c] = 1.f / std::sqrt(prv[c] + eps);
  }
  // y = x·a + b' per channel, a = σ⁻¹·w, b' = b − μ·a
  std::vector<float> scale(static_cast<size_t>(C)), shift(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    scale[size_t(c)] = pr[c] * (pw ? pw[c] : 1.f);
    shift[size_t(c)] = (pb ? pb[c] : 0.f) - pm[c] * scale[size_t(c)];
  }
  float* py = y.data();
  parallel_for(N, grain_for(kGrainElementwise, C), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < C; ++c) py[r * C + c] = px[r * C + c] * scale[size_t(c)] + shift[size_t(c)];
  });

  if (needs_grad(x, weight, bias))
    attach_grad_fn(y, "batch_norm2d", {x, weight, bias},
                   [xs = x.detach(), ws = weight.defined() ? weight.detach() : Tensor(), mean, rstd, training,
                    rx = x.requires_grad(), rw = weight.requires_grad(), rb = bias.requires_grad()](
                       const Tensor& g) -> Grads {
      // As the per-channel backward below: Σg and Σg·x̂ per channel, then
      // dx = σ⁻¹(ĝ − mean(ĝ) − x̂·mean(ĝ·x̂)) in training, σ⁻¹·ĝ in eval.
      const int64_t N = xs.size(0), C = xs.size(1);
      const float *px = xs.data(), *pg = g.data(), *pw = data_or_null(ws), *pm = mean.data(), *pr = rstd.data();
      std::vector<double> sg(size_t(C), 0.0), sgx(size_t(C), 0.0);
      for (int64_t r = 0; r < N; ++r)
        for (int64_t c = 0; c < C; ++c) {
          const float gv = pg[r * C + c];
          sg[size_t(c)] += gv;
          sgx[size_t(c)] += gv * (px[r * C + c] - pm[c]) * pr[c];
        }
      Tensor dx = rx ? empty(xs.shape()) : Tensor();
      Tensor dw = rw ? empty({C}) : Tensor(), db = rb ? empty({C}) : Tensor();
      std::vector<float> wg(static_cast<size_t>(C)), mg(static_cast<size_t>(C)), mgx(static_cast<size_t>(C));
      for (int64_t c = 0; c < C; ++c) {
        if (rw) dw.data()[c] = static_cast<float>(sgx[size_t(c)]);
        if (rb) db.data()[c] = static_cast<float>(sg[size_t(c)]);
        wg[size_t(c)] = pw ? pw[c] : 1.f;
        mg[size_t(c)] = training ? static_cast<float>(wg[size_t(c)] * sg[size_t(c)] / N) : 0.f;
        mgx[size_t(c)] = training ? static_cast<float>(wg[size_t(c)] * sgx[size_t(c)] / N) : 0.f;
      }
      if (rx) {
        float* pd = dx.data();
        parallel_for(N, grain_for(kGrainElementwise, C), [&](int64_t r0, int64_t r1) {
          for (int64_t r = r0; r < r1; ++r)
            for (int64_t c = 0; c < C; ++c) {
              const float xh = (px[r * C + c] - pm[c]) * pr[c];
              pd[r * C + c] = pr[c] * (pg[r * C + c] * wg[size_t(c)] - mg[size_t(c)] - xh * mgx[size_t(c)]);
            }
        });
      }
      return {dx, dw, db};
    });
  return y;
}

}  // namespace

namespace {

// x (B, C, *) as B·C planes of HW values; channel c owns planes b·C + c.
struct ChannelPlanes {
  int64_t B, C, HW;
  int64_t plane(int64_t b, int64_t c) const { return (b * C + c) * HW; }
};

// Channel c's (μ, σ⁻¹): from the batch in training (double sums: N = B·H·W can be 10⁵ and
// more; the running stats updated with the unbiased variance, as PyTorch), else the running stats.
void batch_norm_channel_stats(const ChannelPlanes& P, const float* px, int64_t c, bool training, float momentum,
                              float eps, float* prm, float* prv, float* m_out, float* rs_out) {
  if (!training) {
    *m_out = prm[c];
    *rs_out = 1.f / std::sqrt(prv[c] + eps);
    return;
  }
  const int64_t N = P.B * P.HW;
  double s = 0.0, v = 0.0;
  for (int64_t b = 0; b < P.B; ++b) {
    const float* xp = px + P.plane(b, c);
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < P.HW; ++j) s += xp[j];
  }
  const double md = s / N;
  for (int64_t b = 0; b < P.B; ++b) {
    const float* xp = px + P.plane(b, c);
#pragma omp simd reduction(+ : v)
    for (int64_t j = 0; j < P.HW; ++j) v += (xp[j] - md) * (xp[j] - md);
  }
  *m_out = static_cast<float>(md);
  *rs_out = static_cast<float>(1.0 / std::sqrt(v / N + eps));
  if (prm) {
    prm[c] = (1.f - momentum) * prm[c] + momentum * *m_out;
    prv[c] = (1.f - momentum) * prv[c] + momentum * static_cast<float>(v / (N - 1));
  }
}

// Channel c's backward (derivation: docs/derivations.md §2): Σ g, Σ g·x̂ into *sg, *sgx, then,
// when pd is given, training: dx = σ⁻¹(ĝ − mean(ĝ) − x̂·mean(ĝ·x̂)) (μ, σ depend on x);
// eval: dx = σ⁻¹·ĝ (μ, σ are constants: the op is a per-channel affine map).
void batch_norm_channel_backward(const ChannelPlanes& P, const float* px, const float* pg, int64_t c, float m,
                                 float rs, float wc, bool training, double* sg_out, double* sgx_out, float* pd) {
  const int64_t N = P.B * P.HW;
  double sg = 0.0, sgx = 0.0;  // Σ g, Σ g·x̂ over the channel
  for (int64_t b = 0; b < P.B; ++b) {
    const float *xp = px + P.plane(b, c), *gp = pg + P.plane(b, c);
#pragma omp simd reduction(+ : sg, sgx)
    for (int64_t j = 0; j < P.HW; ++j) {
      sg += gp[j];
      sgx += gp[j] * (xp[j] - m) * rs;
    }
  }
  *sg_out = sg;
  *sgx_out = sgx;
  if (!pd) return;
  // ĝ = g·w, so mean(ĝ) = w·Σg/N and mean(ĝ·x̂) = w·Σg·x̂/N.
  const float mg = training ? static_cast<float>(wc * sg / N) : 0.f;
  const float mgx = training ? static_cast<float>(wc * sgx / N) : 0.f;
  for (int64_t b = 0; b < P.B; ++b) {
    const float *xp = px + P.plane(b, c), *gp = pg + P.plane(b, c);
    float* dp = pd + P.plane(b, c);
    for (int64_t j = 0; j < P.HW; ++j) dp[j] = rs * (gp[j] * wc - mg - (xp[j] - m) * rs * mgx);
  }
}

}  // namespace

// x (B, C, *) seen as B·C planes of HW = prod(*) values; channel c owns planes b·C + c,
// N = B·HW values. weight, bias, running_mean, running_var (C) or undefined.
// Per channel: (μ, σ⁻¹) from the batch (training, biased var) or the running stats (eval);
// y = (x − μ)·σ⁻¹·w + b. Saved for backward: x, weight, μ (C), σ⁻¹ (C), the mode.
Tensor batch_norm2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                    const Tensor& running_mean, const Tensor& running_var, bool training,
                    float momentum, float eps) {
  check(x.dim() >= 2, "batch_norm2d: input must be (B, C, H, W) or (B, C), got shape ", x.shape());
  const ChannelPlanes P{x.size(0), x.size(1), prod(x.shape(), 2, x.dim())};
  const int64_t C = P.C, N = P.B * P.HW;
  check_param("batch_norm2d", "weight", weight, C, x.shape());
  check_param("batch_norm2d", "bias", bias, C, x.shape());
  check_param("batch_norm2d", "running_mean", running_mean, C, x.shape());
  check_param("batch_norm2d", "running_var", running_var, C, x.shape());
  check(running_mean.defined() == running_var.defined(),
        "batch_norm2d: running_mean and running_var must be given together");
  check(training || running_mean.defined(),
        "batch_norm2d: running_mean and running_var are required in eval mode");
  check(!training || N > 1, "batch_norm2d: expected more than 1 value per channel when training, "
                            "got input of shape ", x.shape());

  float* prm = running_mean.defined() ? running_mean.data() : nullptr;
  float* prv = running_var.defined() ? running_var.data() : nullptr;
  if (P.HW == 1) return batch_norm_rows(x, weight, bias, prm, prv, training, momentum, eps);
  Tensor y = empty(x.shape()), mean = empty({C}), rstd = empty({C});
  const float *px = x.data(), *pw = data_or_null(weight), *pb = data_or_null(bias);
  float *py = y.data(), *pm = mean.data(), *pr = rstd.data();
  parallel_for(C, grain_for(kGrainRows, N), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      batch_norm_channel_stats(P, px, c, training, momentum, eps, prm, prv, pm + c, pr + c);
      // Per channel w and b are scalars: fold them into the affine map of every plane.
      const float m = pm[c], rs = pr[c], wc = pw ? pw[c] : 1.f, bc = pb ? pb[c] : 0.f;
      for (int64_t b = 0; b < P.B; ++b) {
        const float* xp = px + P.plane(b, c);
        float* yp = py + P.plane(b, c);
        for (int64_t j = 0; j < P.HW; ++j) yp[j] = (xp[j] - m) * rs * wc + bc;
      }
    }
  });

  if (needs_grad(x, weight, bias))
    attach_grad_fn(y, "batch_norm2d", {x, weight, bias},
                   [xs = x.detach(), ws = weight.defined() ? weight.detach() : Tensor(), mean, rstd, P,
                    training, rx = x.requires_grad(), rw = weight.requires_grad(),
                    rb = bias.requires_grad()](const Tensor& g) -> Grads {
      // g (B, C, *) -> dx (B, C, *), dw (C), db (C), per channel in parallel.
      Tensor dx = rx ? empty(xs.shape()) : Tensor();
      Tensor dw = rw ? empty({P.C}) : Tensor(), db = rb ? empty({P.C}) : Tensor();
      const float *pw = data_or_null(ws), *pm = mean.data(), *pr = rstd.data();
      parallel_for(P.C, grain_for(kGrainRows, P.B * P.HW), [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c) {
          double sg, sgx;
          batch_norm_channel_backward(P, xs.data(), g.data(), c, pm[c], pr[c], pw ? pw[c] : 1.f, training, &sg, &sgx,
                                      rx ? dx.data() : nullptr);
          if (rw) dw.data()[c] = static_cast<float>(sgx);
          if (rb) db.data()[c] = static_cast<float>(sg);
        }
      });
      return {dx, dw, db};
    });
  return y;
}

// ---- normalize ----------------------------------------------------------------
// x seen along dim as (outer, n, inner); y = x / max(‖x‖_p, eps) per lane (o, i).
// Saved for backward: y and the lane norms (outer·inner).
Tensor normalize(const Tensor& x, float p, int dim, float eps) {
  check(p == 1.f || p == 2.f, "normalize: p must be 1 or 2, got ", p);
  dim = wrap_dim(dim, x.dim(), "normalize");
  const DimLayout L = dim_layout(x.shape(), dim);
  const bool l1 = p == 1.f;
  Tensor y = empty(x.shape()), norms = empty({L.lanes()});
  const float* px = x.data();
  float *py = y.data(), *pn = norms.data();
  parallel_lanes(L, kGrainRows, [&](int64_t o, int64_t i0, int64_t i1) {
    const int64_t n = L.n, in = L.inner, w = i1 - i0, base = L.base(o, i0);
    float acc[kLaneBlock] = {};
    if (in == 1) {  // one contiguous row
      const float* xr = px + base;
      float s = 0.f;
      if (l1) {
#pragma omp simd reduction(+ : s)
        for (int64_t k = 0; k < n; ++k) s += std::fabs(xr[k]);
      } else {
#pragma omp simd reduction(+ : s)
        for (int64_t k = 0; k < n; ++k) s += xr[k] * xr[k];
      }
      acc[0] = s;
    } else {  // w interleaved lanes, stride `in` along k
      for (int64_t k = 0; k < n; ++k) {
        const float* xk = px + base + k * in;
        if (l1)
          for (int64_t i = 0; i < w; ++i) acc[i] += std::fabs(xk[i]);
        else
          for (int64_t i = 0; i < w; ++i) acc[i] += xk[i] * xk[i];
      }
    }
    float inv[kLaneBlock];
    for (int64_t i = 0; i < w; ++i) {
      const float nrm = l1 ? acc[i] : std::sqrt(acc[i]);
      pn[o * in + i0 + i] = nrm;
      inv[i] = std::max(nrm, eps);  // the divisor, as F.normalize: x / clamp_min(‖x‖, eps)
    }
    for_each_in_block(L, base, w, [&](int64_t j, int64_t i) { py[j] = px[j] / inv[i]; });
  });

  if (needs_grad(x))
    attach_grad_fn(y, "normalize", {x}, [ys = y.detach(), norms, L, l1, eps](const Tensor& g) -> Grads {
      // g like y -> dx like x, per lane with s = Σ_k g·y and t = y (ℓ2) or sign(x) (ℓ1):
      //   ‖x‖ ≥ eps:  y = x/n,  dn/dx = t, so dx = g/n − t·(Σ g·x)/n² = (g − t·s)/n
      //   ‖x‖ < eps:  y = x/eps, the clamp blocks n, so dx = g/eps
      // Both are dx = g·a − t·c with a = 1/max(n, eps) and c = s/n or 0.
      // sign(x) = sign(y) since the divisor is positive (sign(0) = 0, as PyTorch).
      Tensor dx = empty(ys.shape());
      const float *py = ys.data(), *pg = g.data(), *pn = norms.data();
      float* pd = dx.data();
      auto t_of = [l1](float yv) { return l1 ? float((yv > 0.f) - (yv < 0.f)) : yv; };
      parallel_lanes(L, kGrainRows, [&](int64_t o, int64_t i0, int64_t i1) {
        const int64_t n = L.n, in = L.inner, w = i1 - i0, base = L.base(o, i0);
        float s[kLaneBlock] = {};
        if (in == 1) {
          const float *yr = py + base, *gr = pg + base;
          float acc = 0.f;
#pragma omp simd reduction(+ : acc)
          for (int64_t k = 0; k < n; ++k) acc += gr[k] * yr[k];
          s[0] = acc;
        } else {
          for (int64_t k = 0; k < n; ++k)
            for (int64_t i = 0; i < w; ++i) s[i] += pg[base + k * in + i] * py[base + k * in + i];
        }
        float a[kLaneBlock], c[kLaneBlock];
        for (int64_t i = 0; i < w; ++i) {
          const float nrm = pn[o * in + i0 + i];
          a[i] = 1.f / std::max(nrm, eps);
          c[i] = nrm >= eps ? s[i] / nrm : 0.f;
        }
        for_each_in_block(L, base, w, [&](int64_t j, int64_t i) { pd[j] = pg[j] * a[i] - t_of(py[j]) * c[i]; });
      });
      return {dx};
    });
  return y;
}

}  // namespace sima
