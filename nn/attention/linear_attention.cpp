// Linear attention, one fused node per call, shared by linear_elu and cosformer.
//
// Per (batch, head) pair, q, k, v (N, d); F = φ(q), E = φ(k); the widened features
// Q_i = [w_i1 F_i, .., w_iT F_i], K_j = [w_j1 E_j, .., w_jT E_j] (N, D = T·d), T = 1 and
// w = 1 without re-weighting:
//
//   forward                               backward (G = dL/dO, (N, d))
//   KV  = Kᵀ v           (D, d)           dnum_i = G_i / den_i                       (N, d)
//   z   = Kᵀ 1           (D)              dden_i = −G_i·num_i / den_i² = −G_i·O_i / den_i   (N)
//   num = Q KV           (N, d)                    (0 where the clamp max(s, eps) is at eps)
//   s   = Q z            (N)              dKV = Qᵀ dnum (D, d),  dz = Qᵀ dden (D)
//   den = s + eps  or  max(s, eps)        dQ = dnum KVᵀ + dden zᵀ                    (N, D)
//   O   = num / den      (N, d)           dK = v dKVᵀ + 1 dzᵀ,   dv = K dKV          (N, d)
//                                         dF_i = Σ_t w_it dQ_i,t,  dE_j = Σ_t w_jt dK_j,t  (N, d)
//                                         dq = dF ⊙ φ'(q),       dk = dE ⊙ φ'(k)
//
// (num = Q KV and s = Q z are both linear in Q; KV = Σ_j K_j v_jᵀ and z = Σ_j K_j are
// linear in K, so each row of K collects v_j dKVᵀ from KV and dz from z; the widening
// Q_i,t = w_it F_i is linear too, so its reverse sums the T blocks weighted by w.)
// φ = elu + 1 is exp(x) for x ≤ 0 and x + 1 above, so φ'(x) = φ(x) for x ≤ 0, 1 above;
// φ = relu has φ' = 1[x > 0].
// Only q, k, v (and w) are saved; the backward recomputes F, E, Q, K, KV, z, num (O(N D d),
// the forward's cost) instead of keeping them between the passes.
#include "nn/attention/linear_attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops/gemm.h"
#include "core/ops/vmath.h"
#include "core/parallel.h"
#include "nn/attention/variants.h"

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
int64_t pair_grain(int64_t N, int64_t D, int64_t d) {
  return grain_for(kGemmGrain, N * D * d);
}

// The shapes of one call: N tokens, d channels, T re-weighting terms (D = T·d features);
// w (N, T) or null (T = 1, w = 1); the denominator's eps and whether it clamps.
struct Dims {
  int64_t N, d, T, D;
  const float* w;
  float eps;
  bool clamp;
};

// Per-thread scratch for one pair: F, E (N, d), Q, K (N, D), KV (D, d), z (D).
struct Scratch {
  Tensor F, E, Q, K, KV, z;
  explicit Scratch(const Dims& s)
      : F(empty({s.N, s.d})), E(empty({s.N, s.d})), Q(empty({s.N, s.D})), K(empty({s.N, s.D})),
        KV(empty({s.D, s.d})), z(empty({s.D})) {}
};

// X_i,t = w_it F_i: (N, d) -> (N, D)
void widen(const float* F, const Dims& s, float* X) {
  for (int64_t i = 0; i < s.N; ++i)
    for (int64_t t = 0; t < s.T; ++t) {
      const float wt = s.w ? s.w[i * s.T + t] : 1.f;
      for (int64_t c = 0; c < s.d; ++c) X[i * s.D + t * s.d + c] = wt * F[i * s.d + c];
    }
}

// dF_i = Σ_t w_it dX_i,t: (N, D) -> (N, d), the reverse of widen
void narrow_grad(const float* dX, const Dims& s, float* dF) {
  for (int64_t i = 0; i < s.N; ++i) {
    for (int64_t c = 0; c < s.d; ++c) dF[i * s.d + c] = 0.f;
    for (int64_t t = 0; t < s.T; ++t) {
      const float wt = s.w ? s.w[i * s.T + t] : 1.f;
      for (int64_t c = 0; c < s.d; ++c) dF[i * s.d + c] += wt * dX[i * s.D + t * s.d + c];
    }
  }
}

// F = φ(q), E = φ(k), Q, K widened, KV = Kᵀ v, z = Kᵀ 1 for one pair; returns the exp()
// evaluations.
int64_t pair_prologue(FeatureMap phi, const float* q, const float* k, const float* v, Scratch& w,
                      const Dims& s) {
  const int64_t N = s.N, d = s.d, D = s.D;
  int64_t exps = feature_map(phi, q, w.F.data(), N * d) + feature_map(phi, k, w.E.data(), N * d);
  widen(w.F.data(), s, w.Q.data());
  widen(w.E.data(), s, w.K.data());
  const float* K = w.K.data();
  float* z = w.z.data();
  gemm(true, false, D, d, N, K, v, 0.f, w.KV.data());  // KV = Kᵀ v   (D, d)
  for (int64_t c = 0; c < D; ++c) z[c] = 0.f;
  for (int64_t j = 0; j < N; ++j)                      // z = Kᵀ 1    (D)
    for (int64_t c = 0; c < D; ++c) z[c] += K[j * D + c];
  return exps;
}

// s_i = Q_i · z;  returns den_i (s + eps, or max(s, eps)) and sets *open to whether the
// gradient passes to s (false where the clamp holds den at eps).
inline float denominator(const float* Qi, const float* z, const Dims& s, bool* open = nullptr) {
  float sum = 0.f;
  for (int64_t c = 0; c < s.D; ++c) sum += Qi[c] * z[c];
  if (open) *open = !s.clamp || sum > s.eps;
  return s.clamp ? std::max(sum, s.eps) : sum + s.eps;
}

int64_t forward_kernel(FeatureMap phi, const float* q, const float* k, const float* v, float* o,
                       int64_t BH, const Dims& s) {
  const int64_t N = s.N, d = s.d, D = s.D;
  std::atomic<int64_t> exps{0};
  parallel_for(BH, pair_grain(N, D, d), [&](int64_t p0, int64_t p1) {
    Scratch w(s);
    int64_t count = 0;
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t off = p * N * d;
      count += pair_prologue(phi, q + off, k + off, v + off, w, s);
      const float *Q = w.Q.data(), *z = w.z.data();
      float* O = o + off;
      gemm(false, false, N, d, D, Q, w.KV.data(), 0.f, O);  // num = Q KV   (N, d)
      for (int64_t i = 0; i < N; ++i) {                     // O = num / den
        const float den = denominator(Q + i * D, z, s);
        for (int64_t c = 0; c < d; ++c) O[i * d + c] /= den;
      }
    }
    exps += count;
  });
  return exps.load();
}

// dq, dk, dv (each may be null) from G = dL/dO; see the table at the top.
void backward_kernel(FeatureMap phi, const float* q, const float* k, const float* v, const float* g,
                     float* dq, float* dk, float* dv, int64_t BH, const Dims& s) {
  const int64_t N = s.N, d = s.d, D = s.D;
  parallel_for(BH, pair_grain(N, D, d), [&](int64_t p0, int64_t p1) {
    Scratch w(s);
    Tensor dnum_t = empty({N, d}), dden_t = empty({N}), dKV_t = empty({D, d}), dz_t = empty({D}),
           dX_t = empty({N, D});
    float *dnum = dnum_t.data(), *dden = dden_t.data(), *dKV = dKV_t.data(), *dz = dz_t.data(),
          *dX = dX_t.data();
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t off = p * N * d;
      pair_prologue(phi, q + off, k + off, v + off, w, s);
      const float *Q = w.Q.data(), *K = w.K.data(), *KV = w.KV.data(), *z = w.z.data();
      const float* G = g + off;
      gemm(false, false, N, d, D, Q, KV, 0.f, dnum);  // num = Q KV, overwritten row by row:
      for (int64_t i = 0; i < N; ++i) {
        bool open = true;
        const float den = denominator(Q + i * D, z, s, &open);
        float gn = 0.f;  // G_i · num_i
        for (int64_t c = 0; c < d; ++c) gn += G[i * d + c] * dnum[i * d + c];
        dden[i] = open ? -gn / (den * den) : 0.f;
        for (int64_t c = 0; c < d; ++c) dnum[i * d + c] = G[i * d + c] / den;
      }
      gemm(true, false, D, d, N, Q, dnum, 0.f, dKV);  // dKV = Qᵀ dnum   (D, d)
      for (int64_t c = 0; c < D; ++c) dz[c] = 0.f;
      for (int64_t i = 0; i < N; ++i)                 // dz = Qᵀ dden    (D)
        for (int64_t c = 0; c < D; ++c) dz[c] += dden[i] * Q[i * D + c];
      if (dq) {
        gemm(false, true, N, D, d, dnum, KV, 0.f, dX);  // dQ = dnum KVᵀ + dden zᵀ  (N, D)
        for (int64_t i = 0; i < N; ++i)
          for (int64_t c = 0; c < D; ++c) dX[i * D + c] += dden[i] * z[c];
        narrow_grad(dX, s, dq + off);                       // dF = Σ_t w_t dQ_t
        mul_feature_grad(phi, q + off, w.F.data(), dq + off, N * d);  // dq = dF ⊙ φ'(q)
      }
      if (dk) {
        gemm(false, true, N, D, d, v + off, dKV, 0.f, dX);  // dK = v dKVᵀ + 1 dzᵀ  (N, D)
        for (int64_t j = 0; j < N; ++j)
          for (int64_t c = 0; c < D; ++c) dX[j * D + c] += dz[c];
        narrow_grad(dX, s, dk + off);                       // dE = Σ_t w_t dK_t
        mul_feature_grad(phi, k + off, w.E.data(), dk + off, N * d);  // dk = dE ⊙ φ'(k)
      }
      if (dv) gemm(false, false, N, d, D, K, dKV, 0.f, dv + off);  // dv = K dKV
    }
  });
}

}  // namespace

Reweight parse_reweight(const std::string& name) {
  if (name == "none") return Reweight::None;
  if (name == "cos1d") return Reweight::Cos1d;
  if (name == "cos2d") return Reweight::Cos2d;
  fail("CosformerAttention: option reweight = '", name, "' is not one of: none, cos1d, cos2d");
}

// cos1d: θ_i = π/2 · i/N, i = 1..N;  w_i = (sin θ_i, cos θ_i)
// cos2d: α = π/2 · row/H, β = π/2 · col/W (1-based; 0 for the tokens before the grid);
//        w_i = (sα sβ, sα cβ, cα sβ, cα cβ)
Tensor reweight_factors(Reweight r, int64_t N, int64_t H, int64_t W) {
  if (r == Reweight::None) return Tensor();
  const double half_pi = 1.5707963267948966;
  if (r == Reweight::Cos1d) {
    Tensor w = empty({N, 2});
    for (int64_t i = 0; i < N; ++i) {
      const double th = half_pi * static_cast<double>(i + 1) / static_cast<double>(N);
      w.data()[2 * i] = static_cast<float>(std::sin(th));
      w.data()[2 * i + 1] = static_cast<float>(std::cos(th));
    }
    return w;
  }
  check(H > 0 && W > 0, "CosformerAttention: reweight = cos2d needs the token grid: call forward(x, H, W) ",
        "with the grid of the last H·W of the N = ", N, " tokens (got H = ", H, ", W = ", W,
        "); reweight = cos1d works on the flattened tokens without one");
  const int64_t n_extra = N - H * W;
  check(n_extra >= 0, "CosformerAttention: token grid H = ", H, ", W = ", W, " has ", H * W,
        " tokens, more than N = ", N);
  Tensor w = empty({N, 4});
  for (int64_t i = 0; i < N; ++i) {
    const int64_t g = i - n_extra;  // grid index, < 0 before the grid
    const double a = g < 0 ? 0.0 : half_pi * static_cast<double>(g / W + 1) / static_cast<double>(H);
    const double b = g < 0 ? 0.0 : half_pi * static_cast<double>(g % W + 1) / static_cast<double>(W);
    const double sa = std::sin(a), ca = std::cos(a), sb = std::sin(b), cb = std::cos(b);
    float* wi = w.data() + 4 * i;
    wi[0] = static_cast<float>(sa * sb);
    wi[1] = static_cast<float>(sa * cb);
    wi[2] = static_cast<float>(ca * sb);
    wi[3] = static_cast<float>(ca * cb);
  }
  return w;
}

// q, k, v (B, h, N, d) -> (B, h, N, d).
Tensor linear_attention(const Tensor& q, const Tensor& k, const Tensor& v, FeatureMap phi, float eps,
                        int64_t* exp_calls, const Tensor& w, bool clamp_den) {
  check(q.dim() == 4 && k.shape() == q.shape() && v.shape() == q.shape(),
        "linear_attention: q, k, v must be (B, h, N, d) of one shape, got ", q.shape(), ", ",
        k.shape(), ", ", v.shape());
  check(eps > 0.f, "linear_attention: eps must be positive, got ", eps);
  const int64_t BH = q.size(0) * q.size(1), N = q.size(2), d = q.size(3);
  check(!w.defined() || (w.dim() == 2 && w.size(0) == N && w.size(1) >= 1), "linear_attention: w ",
        w.defined() ? w.shape().str() : "", " must be (N = ", N, ", T) re-weighting factors");
  Tensor wc = w.defined() ? w.detach() : Tensor();
  const int64_t T = w.defined() ? w.size(1) : 1;
  const Dims s{N, d, T, T * d, wc.defined() ? wc.data() : nullptr, eps, clamp_den};
  Tensor out = empty(q.shape());
  int64_t exps = 0;
  if (N > 0 && d > 0) exps = forward_kernel(phi, q.data(), k.data(), v.data(), out.data(), BH, s);
  if (exp_calls) *exp_calls += exps;

  if (needs_grad(q, k, v))
    attach_grad_fn(out, "linear_attention", {q, k, v},
                   [qs = q.detach(), ks = k.detach(), vs = v.detach(), rq = q.requires_grad(),
                    rk = k.requires_grad(), rv = v.requires_grad(), phi, wc, s](const Tensor& g) -> Grads {
      // g (B, h, N, d) -> dq, dk, dv (B, h, N, d)
      const int64_t BH = qs.size(0) * qs.size(1);
      Tensor dq = rq ? empty(qs.shape()) : Tensor(), dk = rk ? empty(qs.shape()) : Tensor(),
             dv = rv ? empty(qs.shape()) : Tensor();
      if (s.N > 0 && s.d > 0)
        backward_kernel(phi, qs.data(), ks.data(), vs.data(), g.data(), rq ? dq.data() : nullptr,
                        rk ? dk.data() : nullptr, rv ? dv.data() : nullptr, BH, s);
      return {dq, dk, dv};
    });
  return out;
}

// ---- the modules -------------------------------------------------------------------

namespace {
// cosformer's reweight option (its row reads it); linear_elu has none.
Reweight reweight_option(const AttentionOptions& opt, FeatureMap phi, const std::string& type_name) {
  if (phi == FeatureMap::Relu) return parse_reweight(attention_option<std::string>(opt, "reweight"));
  check(!opt.own.contains("reweight"), type_name, ": option reweight = ", opt.own.value("reweight", nlohmann::json()).dump(),
        " is a cosformer option; linear_elu has none");
  return Reweight::None;
}
}  // namespace

LinearAttention::LinearAttention(const AttentionOptions& opt, FeatureMap feature_map, const std::string& type_name)
    : Attention(opt, type_name), phi(feature_map), reweight(reweight_option(opt, feature_map, type_name)) {
  check(opt.attn_drop == 0.f, type_name, ": attn_drop ", opt.attn_drop,
        " is not supported (linear attention forms no attention matrix); use 0");
}

Tensor LinearAttention::core(const Tensor& q, const Tensor& k, const Tensor& v, int64_t H, int64_t W) {
  if (qk_hook) qk_hook(q, k);
  const Tensor w = reweight_factors(reweight, q.dim() == 4 ? q.size(2) : 0, H, W);  // (N, T)
  return linear_attention(q, k, v, phi, kLinearAttentionEps, &exp_calls_, w, reweight != Reweight::None);
}

}  // namespace sima
