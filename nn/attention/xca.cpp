// XCA attention: the fused core (ℓ2 normalisation, d×d softmax attention, product with v)
// and its hand-derived backward.
//
// Per (batch, head) pair p = (b, h), all matrices row-major, q, k, v (N×d):
//   q̂, k̂ = colnorm_ℓ2(q), colnorm_ℓ2(k)       (column_norm.h, eps 1e-12)
//   L = q̂ᵀ k̂                  (d×d)   L[c, c'] = Σ_i q̂[i, c] k̂[i, c']
//   A = softmax(τ_h · L)       (d×d)   row-wise; d² exp() per pair
//   A' = A ⊙ mask              (d×d)   attn_drop (mask of 0 and 1/(1−p)), or A itself
//   out = v A'ᵀ                (N×d)   out[i, c] = Σ_c' A'[c, c'] v[i, c'],  i.e. (A' vᵀ)ᵀ
// In timm's layout (q, k, v transposed to (d, N)) the last line is attn @ v; ours keeps
// (N, d) so no transposed copy is made, the transposes are sgemm flags.
#include "nn/attention/xca.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops/gemm.h"
#include "core/ops/vmath.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "nn/attention/column_norm.h"

namespace sima {

namespace {

constexpr float kXcaEps = 1e-12f;  // F.normalize's default

// Row-wise softmax of the d×d matrix τ·L into A; returns the number of exp() evaluated.
int64_t softmax_rows(const float* L, float tau, float* A, int64_t d) {
  for (int64_t c = 0; c < d; ++c) {
    const float* l = L + c * d;
    float* a = A + c * d;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < d; ++j) m = std::max(m, tau * l[j]);
    float s = 0.f;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < d; ++j) {
      a[j] = exp_fast(tau * l[j] - m);
      s += a[j];
    }
    const float inv = 1.f / s;
    for (int64_t j = 0; j < d; ++j) a[j] *= inv;
  }
  return d * d;
}

// The dropout mask of dropout(): one uniform per element drawn serially from `gen`,
// 1/(1−p) where it is ≥ p, else 0. Undefined (no mask) when dropout is off.
Tensor draw_attn_mask(int64_t n, float p, bool training) {
  if (!training || p == 0.f) return Tensor();
  Generator& gen = rng(RngStream::Dropout);
  Tensor mask = empty({n});
  float* pm = mask.data();
  const float scale = 1.f / (1.f - p);
  for (int64_t i = 0; i < n; ++i) pm[i] = gen.uniform() >= p ? scale : 0.f;
  return mask;
}

// The sizes of a call: P = B·h pairs of (N×d) matrices.
struct Dims {
  int64_t B, h, N, d;
  int64_t pairs() const { return B * h; }
  int64_t grain() const { return grain_for(kGemmGrain, 2 * N * d * d); }
};

// The tensors a call reads and writes, as raw pointers (null where absent). qh, kh: q̂, k̂
// kept as full tensors (for the caller), else null and made per chunk.
struct Buffers {
  const float *q, *k, *v, *tau, *mask;
  float *qn, *kn, *L, *A, *out, *qh, *kh;
};

// Forward of every pair (the table at the top); returns the exp() calls.
int64_t forward_kernel(const Dims& D, const Buffers& b) {
  const int64_t N = D.N, d = D.d, h = D.h;
  const bool keep_hat = b.qh != nullptr;
  std::atomic<int64_t> exps{0};
  parallel_for(D.pairs(), D.grain(), [&](int64_t p0, int64_t p1) {
    // scratch per chunk: A ⊙ mask (d×d), then q̂ and k̂ (N×d each) unless kept
    Tensor scratch = empty({d * d + (keep_hat ? 0 : 2 * N * d)});
    float* Ad = scratch.data();
    int64_t n_exp = 0;
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t nd = p * N * d, dd = p * d * d;
      float* qhp = keep_hat ? b.qh + nd : Ad + d * d;
      float* khp = keep_hat ? b.kh + nd : Ad + d * d + N * d;
      float *Lp = b.L + dd, *Ap = b.A + dd;
      column_normalize(b.q + nd, qhp, b.qn + p * d, N, d, ColumnNorm::L2, kXcaEps);
      column_normalize(b.k + nd, khp, b.kn + p * d, N, d, ColumnNorm::L2, kXcaEps);
      gemm(true, false, d, d, N, qhp, khp, 0.f, Lp);    // L = q̂ᵀ k̂     (d×d)
      n_exp += softmax_rows(Lp, b.tau[p % h], Ap, d);  // A = softmax(τ L)
      const float* Au = Ap;
      if (b.mask) {
        for (int64_t j = 0; j < d * d; ++j) Ad[j] = Ap[j] * b.mask[dd + j];
        Au = Ad;
      }
      gemm(false, true, N, d, d, b.v + nd, Au, 0.f, b.out + nd);  // out = v A'ᵀ  (N×d)
    }
    exps += n_exp;
  });
  return exps.load();
}

// Gradients to fill (null: not wanted). dtau: Σ dZ ⊙ L per pair (P), summed over b after.
struct GradBuffers {
  float *dq, *dk, *dv, *dtau;
};

// dA (d×d, = dA' ⊙ mask) -> dZ -> dL = τ dZ in place, row by row (softmax backward, Z = τ L);
// returns Σ dZ ⊙ L, the pair's share of dτ.
double softmax_rows_backward(float* dA, const float* A, const float* L, float tau, int64_t d) {
  double dt = 0.0;
  for (int64_t c = 0; c < d; ++c) {
    float* r = dA + c * d;
    const float *a = A + c * d, *l = L + c * d;
    float sr = 0.f;
    for (int64_t j = 0; j < d; ++j) sr += r[j] * a[j];
    for (int64_t j = 0; j < d; ++j) {
      const float dz = a[j] * (r[j] - sr);
      dt += static_cast<double>(dz) * l[j];
      r[j] = tau * dz;
    }
  }
  return dt;
}

// Backward of every pair, from g = dL/dout (B, h, N, d). Per pair, G (N×d)
// (derivation: docs/derivations/xca.md):
//   dA' = Gᵀ v   (d×d)     from out[i, c] = Σ_c' A'[c, c'] v[i, c']
//   dv  = G A'   (N×d)
//   dA  = dA' ⊙ mask
//   dZ  = A ⊙ (dA − rowsum(dA ⊙ A))        softmax backward, Z = τ L the logits
//   dτ_h += Σ dZ ⊙ L,  dL = τ_h dZ          Z = τ L
//   dq̂ = k̂ dLᵀ, dk̂ = q̂ dL  (N×d)         from L[c, c'] = Σ_i q̂[i, c] k̂[i, c']
//   dq, dk from dq̂, dk̂ through the ℓ2 normalisation backward (column_norm.h).
void backward_kernel(const Dims& D, const Buffers& b, const float* g, const GradBuffers& r) {
  const int64_t N = D.N, d = D.d, h = D.h;
  const bool need_dZ = r.dq || r.dk || r.dtau;
  parallel_for(D.pairs(), D.grain(), [&](int64_t p0, int64_t p1) {
    // scratch per chunk: dA (then dZ, dL), A' (d×d each), q̂, k̂ (N×d each)
    Tensor scratch = empty({2 * d * d + 2 * N * d});
    float *dA = scratch.data(), *Ad = dA + d * d, *qhp = Ad + d * d, *khp = qhp + N * d;
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t nd = p * N * d, dd = p * d * d;
      const float *gp = g + nd, *qp = b.q + nd, *kp = b.k + nd, *vp = b.v + nd;
      const float *Lp = b.L + dd, *Ap = b.A + dd, *mp = b.mask ? b.mask + dd : nullptr;
      if (r.dv) {
        const float* Au = Ap;
        if (mp) {
          for (int64_t j = 0; j < d * d; ++j) Ad[j] = Ap[j] * mp[j];
          Au = Ad;
        }
        gemm(false, false, N, d, d, gp, Au, 0.f, r.dv + nd);  // dv = G A'  (N×d)
      }
      if (!need_dZ) continue;
      column_scale(qp, b.qn + p * d, qhp, N, d, ColumnNorm::L2, kXcaEps);  // q̂
      column_scale(kp, b.kn + p * d, khp, N, d, ColumnNorm::L2, kXcaEps);  // k̂
      gemm(true, false, d, d, N, gp, vp, 0.f, dA);  // dA' = Gᵀ v  (d×d)
      if (mp)
        for (int64_t j = 0; j < d * d; ++j) dA[j] *= mp[j];  // dA = dA' ⊙ mask
      const double dt = softmax_rows_backward(dA, Ap, Lp, b.tau[p % h], d);
      if (r.dtau) r.dtau[p] = static_cast<float>(dt);
      if (r.dq) {
        gemm(false, true, N, d, d, khp, dA, 0.f, r.dq + nd);  // dq̂ = k̂ dLᵀ  (N×d)
        column_normalize_backward(r.dq + nd, qp, b.qn + p * d, r.dq + nd, N, d, ColumnNorm::L2, kXcaEps);
      }
      if (r.dk) {
        gemm(false, false, N, d, d, qhp, dA, 0.f, r.dk + nd);  // dk̂ = q̂ dL  (N×d)
        column_normalize_backward(r.dk + nd, kp, b.kn + p * d, r.dk + nd, N, d, ColumnNorm::L2, kXcaEps);
      }
    }
  });
}

// dτ_h = Σ_b (pair (b, h)'s sum), in a fixed order: deterministic. dtau_pair (B·h) -> (h, 1, 1).
Tensor sum_temperature_grads(const Tensor& dtau_pair, const Dims& D) {
  Tensor dtau = empty({D.h, 1, 1});
  for (int64_t hh = 0; hh < D.h; ++hh) {
    double acc = 0.0;
    for (int64_t b = 0; b < D.B; ++b) acc += dtau_pair.data()[b * D.h + hh];
    dtau.data()[hh] = static_cast<float>(acc);
  }
  return dtau;
}

}  // namespace

// q, k, v (B, h, N, d), temperature (h, 1, 1) -> out (B, h, N, d).
// Saved for backward: q, k, v (views of the qkv output in the module, alive anyway), the
// column norms (B, h, d), L and A (B, h, d, d), the mask, τ: d×d per pair, small next to
// the N×d inputs. q̂, k̂ are recomputed from q, k and the norms.
Tensor xca_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& temperature,
                     float attn_drop, bool training, int64_t* exp_calls, Tensor* q_hat,
                     Tensor* k_hat) {
  check(q.dim() == 4 && k.shape() == q.shape() && v.shape() == q.shape(), "xca_attention: q ",
        q.shape(), ", k ", k.shape(), ", v ", v.shape(), " must all be (B, h, N, d)");
  const Dims D{q.size(0), q.size(1), q.size(2), q.size(3)};
  check(temperature.defined() && temperature.shape() == Shape{D.h, 1, 1}, "xca_attention: temperature ",
        temperature.defined() ? temperature.shape() : Shape{}, " must be (", D.h, ", 1, 1)");
  check(attn_drop >= 0.f && attn_drop < 1.f, "xca_attention: attn_drop must be in [0, 1), got ",
        attn_drop);

  const bool keep_hat = q_hat || k_hat;  // q̂, k̂ as full tensors, else per-chunk scratch
  Tensor qh = keep_hat ? empty(q.shape()) : Tensor(), kh = keep_hat ? empty(q.shape()) : Tensor();
  Tensor out = empty(q.shape());
  Tensor qn = empty({D.B, D.h, D.d}), kn = empty({D.B, D.h, D.d});
  Tensor L = empty({D.B, D.h, D.d, D.d}), A = empty({D.B, D.h, D.d, D.d});
  Tensor mask = draw_attn_mask(D.pairs() * D.d * D.d, attn_drop, training);
  const Buffers b{q.data(), k.data(), v.data(), temperature.data(), mask.defined() ? mask.data() : nullptr,
                  qn.data(), kn.data(), L.data(), A.data(), out.data(),
                  keep_hat ? qh.data() : nullptr, keep_hat ? kh.data() : nullptr};
  const int64_t exps = forward_kernel(D, b);
  if (exp_calls) *exp_calls += exps;
  if (q_hat) *q_hat = qh;
  if (k_hat) *k_hat = kh;

  if (needs_grad(q, k, v, temperature))
    attach_grad_fn(out, "xca_attention", {q, k, v, temperature},
                   [qs = q.detach(), ks = k.detach(), vs = v.detach(), qn, kn, L, A, mask,
                    ts = temperature.detach(), D, rq = q.requires_grad(), rk = k.requires_grad(),
                    rv = v.requires_grad(), rt = temperature.requires_grad()](const Tensor& g) -> Grads {
      // g = dL/dout (B, h, N, d) -> dq, dk, dv (B, h, N, d), dτ (h, 1, 1)
      Tensor dq = rq ? empty(qs.shape()) : Tensor(), dk = rk ? empty(qs.shape()) : Tensor(),
             dv = rv ? empty(qs.shape()) : Tensor();
      Tensor dtau_pair = rt ? empty({D.pairs()}) : Tensor();
      const Buffers b{qs.data(), ks.data(), vs.data(), ts.data(), mask.defined() ? mask.data() : nullptr,
                      qn.data(), kn.data(), L.data(), A.data(), nullptr, nullptr, nullptr};
      const GradBuffers r{rq ? dq.data() : nullptr, rk ? dk.data() : nullptr, rv ? dv.data() : nullptr,
                          rt ? dtau_pair.data() : nullptr};
      backward_kernel(D, b, g.data(), r);
      return {dq, dk, dv, rt ? sum_temperature_grads(dtau_pair, D) : Tensor()};
    });
  return out;
}

// ---- the module -------------------------------------------------------------------

XCAttention::XCAttention(const AttentionOptions& opt) : Attention(opt, "XCAttention") {
  temperature = register_parameter("temperature", ones({opt.num_heads, 1, 1}));
}

Tensor XCAttention::core(const Tensor& q, const Tensor& k, const Tensor& v, int64_t, int64_t) {
  Tensor q_hat, k_hat;
  Tensor out = xca_attention(q, k, v, temperature, opt_.attn_drop, is_training(), &exp_calls_,
                             qk_hook ? &q_hat : nullptr, qk_hook ? &k_hat : nullptr);
  if (qk_hook) qk_hook(q_hat, k_hat);
  return out;
}

}  // namespace sima
