// Linear attention, one fused node per call, shared by linear_elu and cosformer.
//
// Per (batch, head) pair, q, k, v (N, d), Q = φ(q), K = φ(k):
//
//   forward                               backward (G = dL/dO, (N, d))
//   KV  = Kᵀ v           (d, d)           dnum_i = G_i / den_i                       (N, d)
//   z   = Kᵀ 1           (d)              dden_i = −G_i·num_i / den_i² = −G_i·O_i / den_i   (N)
//   num = Q KV           (N, d)           dKV = Qᵀ dnum (d, d),  dz = Qᵀ dden (d)
//   den = Q z + eps      (N)              dQ = dnum KVᵀ + dden zᵀ                    (N, d)
//   O   = num / den      (N, d)           dK = v dKVᵀ + 1 dzᵀ,   dv = K dKV          (N, d)
//                                         dq = dQ ⊙ φ'(q),       dk = dK ⊙ φ'(k)
//
// (num = Q KV and den = Q z are both linear in Q; KV = Σ_j K_j v_jᵀ and z = Σ_j K_j are
// linear in K, so each row of K collects v_j dKVᵀ from KV and dz from z.)
// φ = elu + 1 is exp(x) for x ≤ 0 and x + 1 above, so φ'(x) = φ(x) for x ≤ 0, 1 above;
// φ = relu has φ' = 1[x > 0].
// Only q, k, v are saved; the backward recomputes Q, K, KV, z, num (O(N d²), the forward's
// cost) instead of keeping them between the passes.
#include "nn/attention/linear_attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops/gemm.h"
#include "core/ops/vmath.h"
#include "core/parallel.h"

namespace sima {

namespace {

// out = φ(x) over n floats; returns the exp() evaluations made.
int64_t feature_map(FeatureMap phi, const float* x, float* out, int64_t n) {
  if (phi == FeatureMap::EluPlusOne) {
    // elu(x) + 1 = exp(min(x, 0)) + max(x, 0): branch-free, one exp per element.
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const float neg = x[i] < 0.f ? x[i] : 0.f, pos = x[i] > 0.f ? x[i] : 0.f;
      out[i] = exp_fast(neg) + pos;
    }
    return n;
  }
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] > 0.f ? x[i] : 0.f;
  return 0;
}

// g *= φ'(x) over n floats, given f = φ(x).
void mul_feature_grad(FeatureMap phi, const float* x, const float* f, float* g, int64_t n) {
  if (phi == FeatureMap::EluPlusOne) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) g[i] *= x[i] > 0.f ? 1.f : f[i];
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) g[i] = x[i] > 0.f ? g[i] : 0.f;
  }
}

// Pairs per thread chunk: one pair once a pair is a few sgemm grains of work.
int64_t pair_grain(int64_t N, int64_t d) {
  return std::max<int64_t>(1, kGemmGrain / std::max<int64_t>(1, N * d * d));
}

// Per-thread scratch for one pair: Q, K (N, d), KV (d, d), z (d).
struct Scratch {
  Tensor Q, K, KV, z;
  Scratch(int64_t N, int64_t d) : Q(empty({N, d})), K(empty({N, d})), KV(empty({d, d})), z(empty({d})) {}
};

// Q = φ(q), K = φ(k), KV = Kᵀ v, z = Kᵀ 1 for one pair; returns the exp() evaluations.
int64_t pair_prologue(FeatureMap phi, const float* q, const float* k, const float* v, Scratch& w,
                      int64_t N, int64_t d) {
  float *Q = w.Q.data(), *K = w.K.data(), *KV = w.KV.data(), *z = w.z.data();
  int64_t exps = feature_map(phi, q, Q, N * d) + feature_map(phi, k, K, N * d);
  gemm(true, false, d, d, N, K, v, 0.f, KV);  // KV = Kᵀ v   (d, d)
  for (int64_t c = 0; c < d; ++c) z[c] = 0.f;
  for (int64_t j = 0; j < N; ++j)             // z = Kᵀ 1    (d)
    for (int64_t c = 0; c < d; ++c) z[c] += K[j * d + c];
  return exps;
}

// den_i = Q_i · z + eps
inline float denominator(const float* Qi, const float* z, int64_t d, float eps) {
  float s = 0.f;
  for (int64_t c = 0; c < d; ++c) s += Qi[c] * z[c];
  return s + eps;
}

int64_t forward_kernel(FeatureMap phi, const float* q, const float* k, const float* v, float* o,
                       int64_t BH, int64_t N, int64_t d, float eps) {
  std::atomic<int64_t> exps{0};
  parallel_for(BH, pair_grain(N, d), [&](int64_t p0, int64_t p1) {
    Scratch w(N, d);
    int64_t count = 0;
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t off = p * N * d;
      count += pair_prologue(phi, q + off, k + off, v + off, w, N, d);
      const float *Q = w.Q.data(), *z = w.z.data();
      float* O = o + off;
      gemm(false, false, N, d, d, Q, w.KV.data(), 0.f, O);  // num = Q KV   (N, d)
      for (int64_t i = 0; i < N; ++i) {                     // O = num / den
        const float den = denominator(Q + i * d, z, d, eps);
        for (int64_t c = 0; c < d; ++c) O[i * d + c] /= den;
      }
    }
    exps += count;
  });
  return exps.load();
}

// dq, dk, dv (each may be null) from G = dL/dO; see the table at the top.
void backward_kernel(FeatureMap phi, const float* q, const float* k, const float* v, const float* g,
                     float* dq, float* dk, float* dv, int64_t BH, int64_t N, int64_t d, float eps) {
  parallel_for(BH, pair_grain(N, d), [&](int64_t p0, int64_t p1) {
    Scratch w(N, d);
    Tensor dnum_t = empty({N, d}), dden_t = empty({N}), dKV_t = empty({d, d}), dz_t = empty({d});
    float *dnum = dnum_t.data(), *dden = dden_t.data(), *dKV = dKV_t.data(), *dz = dz_t.data();
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t off = p * N * d;
      pair_prologue(phi, q + off, k + off, v + off, w, N, d);
      const float *Q = w.Q.data(), *K = w.K.data(), *KV = w.KV.data(), *z = w.z.data();
      const float* G = g + off;
      gemm(false, false, N, d, d, Q, KV, 0.f, dnum);  // num = Q KV, overwritten row by row:
      for (int64_t i = 0; i < N; ++i) {
        const float den = denominator(Q + i * d, z, d, eps);
        float gn = 0.f;  // G_i · num_i
        for (int64_t c = 0; c < d; ++c) gn += G[i * d + c] * dnum[i * d + c];
        dden[i] = -gn / (den * den);
        for (int64_t c = 0; c < d; ++c) dnum[i * d + c] = G[i * d + c] / den;
      }
      gemm(true, false, d, d, N, Q, dnum, 0.f, dKV);  // dKV = Qᵀ dnum   (d, d)
      for (int64_t c = 0; c < d; ++c) dz[c] = 0.f;
      for (int64_t i = 0; i < N; ++i)                 // dz = Qᵀ dden    (d)
        for (int64_t c = 0; c < d; ++c) dz[c] += dden[i] * Q[i * d + c];
      if (dq) {
        float* dQ = dq + off;
        gemm(false, true, N, d, d, dnum, KV, 0.f, dQ);  // dQ = dnum KVᵀ + dden zᵀ
        for (int64_t i = 0; i < N; ++i)
          for (int64_t c = 0; c < d; ++c) dQ[i * d + c] += dden[i] * z[c];
        mul_feature_grad(phi, q + off, Q, dQ, N * d);   // dq = dQ ⊙ φ'(q)
      }
      if (dk) {
        float* dK = dk + off;
        gemm(false, true, N, d, d, v + off, dKV, 0.f, dK);  // dK = v dKVᵀ + 1 dzᵀ
        for (int64_t j = 0; j < N; ++j)
          for (int64_t c = 0; c < d; ++c) dK[j * d + c] += dz[c];
        mul_feature_grad(phi, k + off, K, dK, N * d);       // dk = dK ⊙ φ'(k)
      }
      if (dv) gemm(false, false, N, d, d, K, dKV, 0.f, dv + off);  // dv = K dKV
    }
  });
}

}  // namespace

// q, k, v (B, h, N, d) -> (B, h, N, d).
Tensor linear_attention(const Tensor& q, const Tensor& k, const Tensor& v, FeatureMap phi, float eps,
                        int64_t* exp_calls) {
  check(q.dim() == 4 && k.shape() == q.shape() && v.shape() == q.shape(),
        "linear_attention: q, k, v must be (B, h, N, d) of one shape, got ", q.shape(), ", ",
        k.shape(), ", ", v.shape());
  check(eps > 0.f, "linear_attention: eps must be positive, got ", eps);
  const int64_t BH = q.size(0) * q.size(1), N = q.size(2), d = q.size(3);
  Tensor out = empty(q.shape());
  int64_t exps = 0;
  if (N > 0 && d > 0) exps = forward_kernel(phi, q.data(), k.data(), v.data(), out.data(), BH, N, d, eps);
  if (exp_calls) *exp_calls += exps;

  if (needs_grad(q, k, v))
    attach_grad_fn(out, "linear_attention", {q, k, v},
                   [qs = q.detach(), ks = k.detach(), vs = v.detach(), rq = q.requires_grad(),
                    rk = k.requires_grad(), rv = v.requires_grad(), phi, eps](const Tensor& g) -> Grads {
      // g (B, h, N, d) -> dq, dk, dv (B, h, N, d)
      const int64_t BH = qs.size(0) * qs.size(1), N = qs.size(2), d = qs.size(3);
      Tensor dq = rq ? empty(qs.shape()) : Tensor(), dk = rk ? empty(qs.shape()) : Tensor(),
             dv = rv ? empty(qs.shape()) : Tensor();
      if (N > 0 && d > 0)
        backward_kernel(phi, qs.data(), ks.data(), vs.data(), g.data(), rq ? dq.data() : nullptr,
                        rk ? dk.data() : nullptr, rv ? dv.data() : nullptr, BH, N, d, eps);
      return {dq, dk, dv};
    });
  return out;
}

// ---- the modules -------------------------------------------------------------------

LinearAttention::LinearAttention(const AttentionOptions& opt, FeatureMap feature_map, const std::string& type_name)
    : Attention(opt, type_name), phi(feature_map) {
  check(opt.attn_drop == 0.f, type_name, ": attn_drop ", opt.attn_drop,
        " is not supported (linear attention forms no attention matrix); use 0");
}

Tensor LinearAttention::core(const Tensor& q, const Tensor& k, const Tensor& v, int64_t, int64_t) {
  if (qk_hook) qk_hook(q, k);
  return linear_attention(q, k, v, phi, kLinearAttentionEps, &exp_calls_);
}

}  // namespace sima
