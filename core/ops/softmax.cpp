// softmax, log_softmax along any dim, and cross-entropy fused with log_softmax.
//
// All subtract the lane maximum before exponentiating, so exp never overflows (and its
// argument is ≤ 0, the range of the vectorisable exp_fast of vmath.h):
// softmax(x) = exp(x − m) / Σ exp(x − m), log_softmax(x) = x − m − log Σ exp(x − m).
// Lanes (the values one softmax runs over) are walked as in lanes.h: a contiguous row when
// dim is the last one, else blocks of interleaved lanes vectorised across the block.
#include "core/ops/softmax.h"

#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops/lanes.h"
#include "core/ops/vmath.h"
#include "core/parallel.h"

namespace sima {

namespace {

// y = softmax(x) or log_softmax(x) along the lanes of L.
void softmax_forward(const float* px, float* py, const DimLayout& L, bool log) {
  parallel_lanes(L, kGrainRows, [&](int64_t o, int64_t i0, int64_t i1) {
    const int64_t n = L.n, in = L.inner, w = i1 - i0, base = L.base(o, i0);
    if (in == 1) {  // a contiguous row: max, exp and sum, scale
      const float* xr = px + base;
      float* yr = py + base;
      float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
      for (int64_t k = 0; k < n; ++k) m = xr[k] > m ? xr[k] : m;  // (std::max does not vectorise)
      float s = 0.f;
#pragma omp simd reduction(+ : s)
      for (int64_t k = 0; k < n; ++k) {
        yr[k] = exp_fast(xr[k] - m);
        s += yr[k];
      }
      if (log) {
        const float lse = m + std::log(s);
        for (int64_t k = 0; k < n; ++k) yr[k] = xr[k] - lse;
      } else {
        const float inv = 1.f / s;
        for (int64_t k = 0; k < n; ++k) yr[k] *= inv;
      }
      return;
    }
    float m[kLaneBlock], s[kLaneBlock] = {};
    for (int64_t i = 0; i < w; ++i) m[i] = -std::numeric_limits<float>::infinity();
    for (int64_t k = 0; k < n; ++k)
      for (int64_t i = 0; i < w; ++i) m[i] = std::max(m[i], px[base + k * in + i]);
    for (int64_t k = 0; k < n; ++k)
      for (int64_t i = 0; i < w; ++i) {
        const int64_t j = base + k * in + i;
        py[j] = exp_fast(px[j] - m[i]);
        s[i] += py[j];
      }
    if (log) {
      for (int64_t i = 0; i < w; ++i) m[i] += std::log(s[i]);  // m := log Σ exp(x)
      for (int64_t k = 0; k < n; ++k)
        for (int64_t i = 0; i < w; ++i) py[base + k * in + i] = px[base + k * in + i] - m[i];
    } else {
      for (int64_t i = 0; i < w; ++i) s[i] = 1.f / s[i];
      for (int64_t k = 0; k < n; ++k)
        for (int64_t i = 0; i < w; ++i) py[base + k * in + i] *= s[i];
    }
  });
}

// The backward of both, from the saved output y:
//   softmax:     dy_k/dx_j = y_k(δ_kj − y_j)  =>  dx = y·(g − Σ g·y)
//   log_softmax: dy_k/dx_j = δ_kj − p_j       =>  dx = g − p·Σ g,   p = exp(y)
void softmax_backward(const float* py, const float* pg, float* pd, const DimLayout& L, bool log) {
  parallel_lanes(L, kGrainRows, [&](int64_t o, int64_t i0, int64_t i1) {
    const int64_t n = L.n, in = L.inner, w = i1 - i0, base = L.base(o, i0);
    float s[kLaneBlock] = {};  // Σ g·y (softmax) or Σ g (log_softmax) per lane
    if (in == 1) {
      const float *yr = py + base, *gr = pg + base;
      float acc = 0.f;
      if (log) {
#pragma omp simd reduction(+ : acc)
        for (int64_t k = 0; k < n; ++k) acc += gr[k];
      } else {
#pragma omp simd reduction(+ : acc)
        for (int64_t k = 0; k < n; ++k) acc += gr[k] * yr[k];
      }
      s[0] = acc;
    } else {
      for (int64_t k = 0; k < n; ++k)
        for (int64_t i = 0; i < w; ++i) s[i] += log ? pg[base + k * in + i] : pg[base + k * in + i] * py[base + k * in + i];
    }
    if (log)
      for_each_in_block(L, base, w, [&](int64_t j, int64_t i) { pd[j] = pg[j] - exp_fast(py[j]) * s[i]; });
    else
      for_each_in_block(L, base, w, [&](int64_t j, int64_t i) { pd[j] = py[j] * (pg[j] - s[i]); });
  });
}

Tensor softmax_op(const char* name, const Tensor& x, int dim, bool log) {
  dim = wrap_dim(dim, x.dim(), name);
  const DimLayout L = dim_layout(x.shape(), dim);
  Tensor y = empty(x.shape());
  softmax_forward(x.data(), y.data(), L, log);
  if (needs_grad(x))
    attach_grad_fn(y, name, {x}, [ys = y.detach(), L, log](const Tensor& g) -> Grads {
      Tensor dx = empty(ys.shape());
      softmax_backward(ys.data(), g.data(), dx.data(), L, log);
      return {dx};
    });
  return y;
}

}  // namespace

// x (..., n, ...) -> y like x, each lane along dim summing to 1.
Tensor softmax(const Tensor& x, int dim) { return softmax_op("softmax", x, dim, false); }
// x -> y like x, y = x − logsumexp(x) along dim.
Tensor log_softmax(const Tensor& x, int dim) { return softmax_op("log_softmax", x, dim, true); }

// ---- cross_entropy ------------------------------------------------------------
// logits z (B, C), a target distribution q per row, loss_b = −Σ_c q_bc · log_softmax(z)_bc.
// q = (1−ε)·t + ε/C with t the one-hot of an integer target or a given soft row.
// One node: forward keeps logp = log_softmax(z) (B, C); backward, with Q_b = Σ_c q_bc
// (1 for one-hot and probability rows) and s_b the upstream scale of row b
// (g/B for Mean, g for Sum, g_b for None):
//   dz_bc = s_b · (softmax(z)_bc · Q_b − q_bc)          (∂ log p_c'/∂z_c = δ − p_c)
//   dt_bc = −s_b · (1−ε) · logp_bc                      (soft targets only)
namespace {

void check_cross_entropy_inputs(const Tensor& logits, const std::vector<int64_t>* hard, const Tensor& soft,
                                float eps) {
  const Shape& zs = logits.shape();
  check(logits.dim() == 2, "cross_entropy: logits must be (B, C), got shape ", zs);
  const int64_t B = zs[0], C = zs[1];
  check(C > 0, "cross_entropy: logits of shape ", zs, " have no classes");
  check(eps >= 0.f && eps <= 1.f, "cross_entropy: label_smoothing must be in [0, 1], got ", eps);
  if (hard) {
    check(static_cast<int64_t>(hard->size()) == B, "cross_entropy: logits of shape ", zs, " but ",
          hard->size(), " targets (batch sizes differ)");
    for (int64_t b = 0; b < B; ++b) {
      const int64_t t = (*hard)[b];
      check(t >= 0 && t < C, "cross_entropy: target ", t, " at index ", b, " is out of range for ",
            C, " classes");
    }
  } else {
    check(soft.shape() == zs, "cross_entropy: soft targets of shape ", soft.shape(),
          " for logits of shape ", zs, " (they must match)");
  }
}

// The per-row loss from logp (B, C): −(on·logp[t] + off·Σ logp) for hard targets t, or
// −Σ (on·t_c + off)·logp_c for soft rows pt (B, C). In parallel over rows.
void cross_entropy_forward_rows(const float* plp, const int64_t* hard, const float* pt, int64_t B, int64_t C,
                                float on, float off, float* pl) {
  parallel_for(B, grain_for(kGrainRows, C), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const float* lr = plp + b * C;
      float s = 0.f;  // Σ logp (the smoothing term) or Σ q·logp
      if (hard) {
#pragma omp simd reduction(+ : s)
        for (int64_t c = 0; c < C; ++c) s += lr[c];
        pl[b] = -(on * lr[hard[b]] + off * s);
      } else {
        const float* tr = pt + b * C;
#pragma omp simd reduction(+ : s)
        for (int64_t c = 0; c < C; ++c) s += (on * tr[c] + off) * lr[c];
        pl[b] = -s;
      }
    }
  });
}

// The backward of the table above: dz (null: not wanted), dt (null: not wanted) from logp,
// the targets and the upstream g (() or (B)); derivation: docs/derivations.md §4.
void cross_entropy_backward_rows(const float* plp, const int64_t* hard, const float* pt, const float* pg, int64_t B,
                                 int64_t C, float on, float off, Reduction reduction, float* pdz, float* pdt) {
  parallel_for(B, grain_for(kGrainRows, C), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const float sb = reduction == Reduction::None ? pg[b] : reduction == Reduction::Mean ? pg[0] / B : pg[0];
      const float* lr = plp + b * C;
      if (pdt) {
        float* dtr = pdt + b * C;
        for (int64_t c = 0; c < C; ++c) dtr[c] = -sb * on * lr[c];
      }
      if (!pdz) continue;
      float* dr = pdz + b * C;
      if (hard) {  // Q = 1
        for (int64_t c = 0; c < C; ++c) dr[c] = sb * (exp_fast(lr[c]) - off);
        dr[hard[b]] -= sb * on;
      } else {
        const float* tr = pt + b * C;
        float q = 0.f;
#pragma omp simd reduction(+ : q)
        for (int64_t c = 0; c < C; ++c) q += on * tr[c] + off;
        for (int64_t c = 0; c < C; ++c) dr[c] = sb * (exp_fast(lr[c]) * q - (on * tr[c] + off));
      }
    }
  });
}

Tensor cross_entropy_impl(const Tensor& logits, const std::vector<int64_t>* hard, const Tensor& soft,
                          float eps, Reduction reduction) {
  check_cross_entropy_inputs(logits, hard, soft, eps);
  const Shape& zs = logits.shape();
  const int64_t B = zs[0], C = zs[1];
  Tensor logp = empty(zs), row_loss = empty({B});
  softmax_forward(logits.data(), logp.data(), DimLayout{B, C, 1}, /*log=*/true);
  const float on = 1.f - eps, off = eps / C;
  float* pl = row_loss.data();
  cross_entropy_forward_rows(logp.data(), hard ? hard->data() : nullptr, hard ? nullptr : soft.data(), B, C, on, off,
                             pl);
  Tensor loss;
  if (reduction == Reduction::None) {
    loss = row_loss;
  } else {
    double total = 0.0;  // serial, in order: deterministic
    for (int64_t b = 0; b < B; ++b) total += pl[b];
    if (reduction == Reduction::Mean) total /= static_cast<double>(B);
    loss = scalar_tensor(static_cast<float>(total));
  }

  const bool rt = !hard && soft.requires_grad();
  if (needs_grad(logits, hard ? Tensor() : soft)) {
    std::vector<int64_t> targets = hard ? *hard : std::vector<int64_t>();
    attach_grad_fn(loss, "cross_entropy", {logits, hard ? Tensor() : soft},
                   [logp, targets = std::move(targets), ts = hard ? Tensor() : soft.detach(),
                    hard = hard != nullptr, rz = logits.requires_grad(), rt, on, off,
                    reduction](const Tensor& g) -> Grads {
      // g () or (B) -> dz (B, C), dt (B, C).
      Tensor dz = rz ? empty(logp.shape()) : Tensor(), dt = rt ? empty(logp.shape()) : Tensor();
      cross_entropy_backward_rows(logp.data(), hard ? targets.data() : nullptr, hard ? nullptr : ts.data(), g.data(),
                                  logp.size(0), logp.size(1), on, off, reduction, rz ? dz.data() : nullptr,
                                  rt ? dt.data() : nullptr);
      return {dz, dt};
    });
  }
  return loss;
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const std::vector<int64_t>& target, float label_smoothing,
                     Reduction reduction) {
  return cross_entropy_impl(logits, &target, Tensor(), label_smoothing, reduction);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target_probs, float label_smoothing,
                     Reduction reduction) {
  check(target_probs.defined(), "cross_entropy: soft targets are undefined");
  return cross_entropy_impl(logits, nullptr, target_probs, label_smoothing, reduction);
}

}  // namespace sima
