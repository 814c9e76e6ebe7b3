// Class attention: the fused core (forward kernel and hand-derived backward) and the module.
//
// The core reads q, k, v straight out of the qkv output (B, T, 3C) = (B, T, 3, h, d): for
// pair (b, head), q(t, c) sits at row t, column head·d + c, k at C + head·d + c, v at
// 2C + head·d + c. No head split copy: a pair's products are one query row against T keys,
// far too small for an sgemm, so they are plain loops. One pair per (b, head), in parallel.
//
// Forward per pair (T tokens, d channels, token 0 the class token):
//   softmax: z_t = s · Σ_c q(0,c) k(t,c),  s = d^-½;  a = softmax(z)   (T exp calls)
//   sima:    n_q[c] = Σ_t |q(t,c)|, n_k[c] = Σ_t |k(t,c)|,  m = max(n, eps)
//            q̂(0,c) = q(0,c) / m_q[c],  k̂(t,c) = k(t,c) / m_k[c]
//            a_t = Σ_c q̂(0,c) k̂(t,c)                                   (no exp)
//   out_c = Σ_t a_t v(t,c)                                               (d)
//
// Backward per pair, from g (d) = the pair's slice of dL/dout (B, 1, C):
//   da_t = Σ_c g_c v(t,c)                 dv(t,c) = a_t g_c
//   softmax: dz_t = a_t (da_t − Σ_u a_u da_u)        (softmax Jacobian a(δ − a))
//            dq(0,c) = s Σ_t dz_t k(t,c),  dk(t,c) = s dz_t q(0,c),  dq(t>0, c) = 0
//   sima:    dq̂(0,c) = Σ_t da_t k̂(t,c),  dk̂(t,c) = da_t q̂(0,c)
//     then the ℓ1-normalisation backward per column (docs/derivations.md §6): for y = x / max(n, eps),
//     s = Σ_t g_t y_t,  dx_t = (g_t − sign(x_t) s) / n  when n ≥ eps,  else g_t / eps.
//     k column c: s_k = Σ_t dk̂(t,c) k̂(t,c) = q̂(0,c) · dq̂(0,c)
//       dk(t,c) = (dk̂(t,c) − sign(k(t,c)) s_k) / m_k[c]     (no s_k term when n_k < eps)
//     q column c: only row 0 of q̂ is used, so g = (dq̂(0,c), 0, ..., 0) and s_q = dq̂(0,c) q̂(0,c)
//       dq(t,c) = (δ_t0 dq̂(0,c) − sign(q(t,c)) s_q) / m_q[c]   (every token gets a gradient)
//
// Saved for backward: qkv (the Linear output, alive anyway), a (B, h, T), and for sima the
// raw column sums n_q, n_k (B, h, d) each.
#include "nn/attention/class_attention.h"

#include <atomic>
#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops/dropout.h"
#include "core/ops/shape_ops.h"
#include "core/ops/vmath.h"
#include "core/parallel.h"

namespace sima {

namespace {

inline float sign_of(float x) { return static_cast<float>((x > 0.f) - (x < 0.f)); }

// The sizes of a call: B·h pairs of T tokens, d channels; rows of qkv are RS = 3C floats.
struct Dims {
  int64_t B, T, C, h, d;
  int64_t RS() const { return 3 * C; }
  int64_t pairs() const { return B * h; }
  // Pairs per chunk: enough T·d work per thread to pay for the parallel region.
  int64_t grain() const { return grain_for(kGrainElementwise, T * d); }
  int64_t offset(int64_t i) const { return (i / h) * T * RS() + (i % h) * d; }  // q(0, 0) of pair i in qkv
};

// The saved state: a (B, h, T), and for sima the raw column sums n_q, n_k (B, h, d); null: softmax.
struct Saved {
  float *a, *nq, *nk;
};

// The scores of one pair into a (T): softmax z_t = s · q(0)·k_t then softmax (returns T exp
// calls), or sima a_t = Σ_c q̂(0,c) k̂(t,c) (n_q, n_k filled; returns 0). w: scratch (d).
int64_t pair_scores(const Dims& D, const float* q, float* a, float* nq, float* nk, float scale, float eps,
                    float* w) {
  const int64_t T = D.T, d = D.d, RS = D.RS();
  const float* k = q + D.C;
  if (nq) {
    for (int64_t c = 0; c < d; ++c) nq[c] = nk[c] = 0.f;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < d; ++c) {
        nq[c] += std::fabs(q[t * RS + c]);
        nk[c] += std::fabs(k[t * RS + c]);
      }
    // a_t = Σ_c k(t,c) · w_c with w_c = q̂(0,c) / m_k[c]
    for (int64_t c = 0; c < d; ++c) w[c] = q[c] / std::max(nq[c], eps) / std::max(nk[c], eps);
  } else {
    for (int64_t c = 0; c < d; ++c) w[c] = q[c] * scale;
  }
  for (int64_t t = 0; t < T; ++t) {
    float z = 0.f;
    for (int64_t c = 0; c < d; ++c) z += w[c] * k[t * RS + c];
    a[t] = z;
  }
  if (nq) return 0;
  float m = -std::numeric_limits<float>::infinity(), sum = 0.f;  // a = softmax(z)
  for (int64_t t = 0; t < T; ++t) m = std::max(m, a[t]);
  for (int64_t t = 0; t < T; ++t) {
    a[t] = exp_fast(a[t] - m);
    sum += a[t];
  }
  for (int64_t t = 0; t < T; ++t) a[t] /= sum;
  return T;
}

// Forward of every pair (the table at the top): qkv (B, T, 3C) -> out (B, 1, C); returns the exp() calls.
int64_t forward_kernel(const Dims& D, const float* px, const Saved& sv, float* po, float scale, float eps) {
  const int64_t T = D.T, d = D.d, RS = D.RS();
  std::atomic<int64_t> exps{0};
  parallel_for(D.pairs(), D.grain(), [&](int64_t i0, int64_t i1) {
    Tensor wbuf = empty({d});
    int64_t local_exps = 0;
    for (int64_t i = i0; i < i1; ++i) {
      const float* q = px + D.offset(i);  // q(t, c) = q[t·RS + c]
      const float* v = q + 2 * D.C;
      float* a = sv.a + i * T;
      local_exps += pair_scores(D, q, a, sv.nq ? sv.nq + i * d : nullptr, sv.nk ? sv.nk + i * d : nullptr, scale,
                                eps, wbuf.data());
      float* o = po + (i / D.h) * D.C + (i % D.h) * d;
      for (int64_t c = 0; c < d; ++c) o[c] = 0.f;
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < d; ++c) o[c] += a[t] * v[t * RS + c];
    }
    exps += local_exps;
  });
  return exps.load();
}

// softmax: from da (T), dz_t = s a_t (da_t − Σ_u a_u da_u); dq(0,c) = Σ_t dz_t k(t,c),
// dk(t,c) = dz_t q(0,c). Rows t > 0 of dq stay 0.
void softmax_pair_backward(const Dims& D, const float* q, const float* a, const float* da, float* dq, float scale) {
  const int64_t T = D.T, d = D.d, RS = D.RS();
  const float* k = q + D.C;
  float* dk = dq + D.C;
  float r = 0.f;
  for (int64_t t = 0; t < T; ++t) r += a[t] * da[t];
  for (int64_t c = 0; c < d; ++c) dq[c] = 0.f;
  for (int64_t t = 0; t < T; ++t) {
    const float dz = scale * a[t] * (da[t] - r);
    for (int64_t c = 0; c < d; ++c) {
      dq[c] += dz * k[t * RS + c];
      dk[t * RS + c] = dz * q[c];
    }
  }
}

// sima: dq̂(0,c) = Σ_t da_t k̂(t,c), dk̂(t,c) = da_t q̂(0,c), then the ℓ1 backward of each
// column (the table at the top). qh, dqh: scratch (d each).
void sima_pair_backward(const Dims& D, const float* q, const float* nq, const float* nk, const float* da, float* dq,
                        float eps, float* qh, float* dqh) {
  const int64_t T = D.T, d = D.d, RS = D.RS();
  const float* k = q + D.C;
  float* dk = dq + D.C;
  for (int64_t c = 0; c < d; ++c) {
    qh[c] = q[c] / std::max(nq[c], eps);
    dqh[c] = 0.f;
  }
  for (int64_t t = 0; t < T; ++t)  // dq̂(0,c) = Σ_t da_t k̂(t,c)  (k̂ divided below)
    for (int64_t c = 0; c < d; ++c) dqh[c] += da[t] * k[t * RS + c];
  for (int64_t c = 0; c < d; ++c) dqh[c] /= std::max(nk[c], eps);
  for (int64_t c = 0; c < d; ++c) {
    // k column: dk̂(t,c) = da_t q̂(0,c), s_k = q̂(0,c) dq̂(0,c)
    const float mk = std::max(nk[c], eps), sk = nk[c] >= eps ? qh[c] * dqh[c] : 0.f;
    for (int64_t t = 0; t < T; ++t) dk[t * RS + c] = (da[t] * qh[c] - sign_of(k[t * RS + c]) * sk) / mk;
    // q column: g = dq̂(0,c) at row 0 only, s_q = dq̂(0,c) q̂(0,c)
    const float mq = std::max(nq[c], eps), sq = nq[c] >= eps ? dqh[c] * qh[c] : 0.f;
    for (int64_t t = 0; t < T; ++t) dq[t * RS + c] = ((t == 0 ? dqh[c] : 0.f) - sign_of(q[t * RS + c]) * sq) / mq;
  }
}

// Backward of every pair, from g = dL/dout (B, 1, C) into dx (B, T, 3C), zeroed (the table at
// the top; derivation: docs/derivations/class_attention.md).
void backward_kernel(const Dims& D, const float* px, const Saved& sv, const float* pg, float* pdx, float scale,
                     float eps) {
  const int64_t T = D.T, d = D.d, RS = D.RS();
  parallel_for(D.pairs(), D.grain(), [&](int64_t i0, int64_t i1) {
    Tensor buf = empty({T + 2 * d});
    float *da = buf.data(), *qh = da + T, *dqh = qh + d;  // da (T), q̂(0,·) (d), dq̂(0,·) (d)
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t off = D.offset(i);
      const float *q = px + off, *v = q + 2 * D.C, *a = sv.a + i * T;
      const float* gc = pg + (i / D.h) * D.C + (i % D.h) * d;
      float *dq = pdx + off, *dv = dq + 2 * D.C;
      for (int64_t t = 0; t < T; ++t) {  // da_t = g · v_t,  dv_t = a_t g
        float s = 0.f;
        for (int64_t c = 0; c < d; ++c) {
          s += gc[c] * v[t * RS + c];
          dv[t * RS + c] = a[t] * gc[c];
        }
        da[t] = s;
      }
      if (!sv.nq) softmax_pair_backward(D, q, a, da, dq, scale);
      else sima_pair_backward(D, q, sv.nq + i * d, sv.nk + i * d, da, dq, eps, qh, dqh);
    }
  });
}

}  // namespace

// qkv (B, T, 3C) -> out (B, 1, C).
Tensor class_attention(const Tensor& qkv, int64_t h, const std::string& variant, float eps,
                       int64_t* exp_calls, Tensor* attn) {
  check(variant == "softmax" || variant == "sima", "class_attention: variant '", variant,
        "' is not one of softmax, sima");
  check(h > 0, "class_attention: num_heads must be positive, got ", h);
  check(qkv.dim() == 3 && qkv.size(2) % (3 * h) == 0 && qkv.size(1) > 0,
        "class_attention: qkv ", qkv.shape(), " must be (B, T, 3C) with T > 0 and C divisible by ",
        h, " heads");
  check(eps > 0.f, "class_attention: eps must be positive, got ", eps);
  const bool sima = variant == "sima";
  const int64_t C = qkv.size(2) / 3;
  const Dims D{qkv.size(0), qkv.size(1), C, h, C / h};
  const float scale = 1.f / std::sqrt(static_cast<float>(D.d));

  Tensor out = empty({D.B, 1, C}), A = empty({D.B, h, D.T});
  Tensor NQ = sima ? empty({D.B, h, D.d}) : Tensor(), NK = sima ? empty({D.B, h, D.d}) : Tensor();
  const Saved sv{A.data(), sima ? NQ.data() : nullptr, sima ? NK.data() : nullptr};
  const int64_t exps = forward_kernel(D, qkv.data(), sv, out.data(), scale, eps);
  if (exp_calls) *exp_calls += exps;
  if (attn) *attn = A.detach();

  if (needs_grad(qkv)) {
    attach_grad_fn(out, "class_attention", {qkv},
                   [xs = qkv.detach(), A, NQ, NK, D, sima, scale, eps](const Tensor& g) -> Grads {
      // g (B, 1, C) -> dqkv (B, T, 3C); rows t > 0 of dq stay 0 for softmax.
      Tensor dx = zeros(xs.shape());
      const Saved sv{A.data(), sima ? NQ.data() : nullptr, sima ? NK.data() : nullptr};
      backward_kernel(D, xs.data(), sv, g.data(), dx.data(), scale, eps);
      return {dx};
    });
  }
  return out;
}

// ---- module ------------------------------------------------------------------------------

ClassAttention::ClassAttention(const ClassAttentionOptions& opt) : Module("ClassAttention"), opt_(opt) {
  check(opt.dim > 0 && opt.num_heads > 0, "ClassAttention: dim (", opt.dim, ") and num_heads (",
        opt.num_heads, ") must be positive");
  check(opt.dim % opt.num_heads == 0, "ClassAttention: num_heads ", opt.num_heads,
        " does not divide dim ", opt.dim);
  check(opt.variant == "softmax" || opt.variant == "sima", "ClassAttention: variant '", opt.variant,
        "' is not one of softmax, sima");
  check(opt.eps > 0.f, "ClassAttention: eps must be positive, got ", opt.eps);
  check(opt.proj_drop >= 0.f && opt.proj_drop < 1.f, "ClassAttention: proj_drop must be in [0, 1), got ",
        opt.proj_drop);
  qkv = register_module("qkv", std::make_shared<Linear>(opt.dim, 3 * opt.dim, opt.qkv_bias));
  proj = register_module("proj", std::make_shared<Linear>(opt.dim, opt.dim));
}

// x (B, T, C) -> cat([proj_drop(proj(cls)) (B, 1, C), x[:, 1:] (B, T-1, C)], 1).
Tensor ClassAttention::forward(const Tensor& x) {
  check(x.dim() == 3 && x.size(2) == opt_.dim && x.size(1) > 0, "ClassAttention: input ", x.shape(),
        " must be (B, N+1, ", opt_.dim, ") with the class token first");
  Tensor attn;
  Tensor cls = class_attention(qkv->forward(x), opt_.num_heads, opt_.variant, opt_.eps, &exp_calls_,
                               attn_hook ? &attn : nullptr);
  if (attn_hook) attn_hook(attn);
  cls = dropout(proj->forward(cls), opt_.proj_drop, is_training());
  return cat({cls, slice(x, 1, 1, x.size(1))}, 1);
}

}  // namespace sima
