// Efficient Attention, one fused node: forward kernel and hand-derived backward.
//
// Per (batch, head) pair, q, k, v (N, d):
//
//   forward                                backward (G = dL/dO, (N, d))
//   Q̂ = softmax_rows(q)     (N, d)          dQ̂ = G Ctxᵀ                 (N, d)
//   K̂ = softmax_cols(k)     (N, d)          dCtx = Q̂ᵀ G                 (d, d)
//   Ctx = K̂ᵀ v              (d, d)          dK̂ = v dCtxᵀ,  dv = K̂ dCtx  (N, d)
//   O = Q̂ Ctx               (N, d)          dq_i = Q̂_i ⊙ (dQ̂_i − ⟨dQ̂_i, Q̂_i⟩)          per row i
//                                           dk_c = K̂_c ⊙ (dK̂_c − ⟨dK̂_c, K̂_c⟩)          per column c
//
// (The softmax Jacobian diag(y) − y yᵀ, applied along the axis each softmax ran over: the
// d channels of a query row, the N tokens of a key column.)
// Saved for backward: v (a view the caller keeps alive), Q̂ and K̂ (B, h, N, d) and Ctx
// (B, h, d, d): the backward then makes no exp() and repeats no product of the forward.
#include "nn/attention/efficient.h"

#include <algorithm>
#include <atomic>
#include <limits>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops/gemm.h"
#include "core/ops/vmath.h"
#include "core/parallel.h"

namespace sima {

namespace {

// Pairs per thread chunk: one pair once a pair is a few sgemm grains of work.
int64_t pair_grain(int64_t N, int64_t d) {
  return grain_for(kGemmGrain, 2 * N * d * d);
}

// y = softmax of x (N, d) over each row (stride 1, n = d) or each column (stride d, n = N).
// count: the number of softmaxes, step: the offset between their first elements.
void softmax_strided(const float* x, float* y, int64_t count, int64_t step, int64_t n, int64_t stride) {
  for (int64_t r = 0; r < count; ++r) {
    const float* xr = x + r * step;
    float* yr = y + r * step;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) m = std::max(m, xr[j * stride]);
    float sum = 0.f;
    for (int64_t j = 0; j < n; ++j) sum += (yr[j * stride] = exp_fast(xr[j * stride] - m));
    const float inv = 1.f / sum;
    for (int64_t j = 0; j < n; ++j) yr[j * stride] *= inv;
  }
}

// g = y ⊙ (g − ⟨g, y⟩) along each softmax (the layout of softmax_strided), in place.
void softmax_backward_strided(const float* y, float* g, int64_t count, int64_t step, int64_t n,
                              int64_t stride) {
  for (int64_t r = 0; r < count; ++r) {
    const float* yr = y + r * step;
    float* gr = g + r * step;
    float dot = 0.f;
    for (int64_t j = 0; j < n; ++j) dot += gr[j * stride] * yr[j * stride];
    for (int64_t j = 0; j < n; ++j) gr[j * stride] = yr[j * stride] * (gr[j * stride] - dot);
  }
}

}  // namespace

// q, k, v (B, h, N, d) -> out (B, h, N, d).
Tensor efficient_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t* exp_calls) {
  check(q.dim() == 4 && k.shape() == q.shape() && v.shape() == q.shape(),
        "efficient_attention: q, k, v must be (B, h, N, d) of one shape, got ", q.shape(), ", ",
        k.shape(), ", ", v.shape());
  const int64_t B = q.size(0), h = q.size(1), N = q.size(2), d = q.size(3), BH = B * h;
  check(N > 0 && d > 0, "efficient_attention: N and d must be positive, got q ", q.shape());
  Tensor qh = empty(q.shape()), kh = empty(q.shape()), ctx = empty({B, h, d, d}), out = empty(q.shape());
  const float *pq = q.data(), *pk = k.data(), *pv = v.data();
  float *pqh = qh.data(), *pkh = kh.data(), *pc = ctx.data(), *po = out.data();
  const int64_t grain = pair_grain(N, d);
  parallel_for(BH, grain, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t off = p * N * d;
      softmax_strided(pq + off, pqh + off, N, d, d, 1);  // Q̂: N rows of d
      softmax_strided(pk + off, pkh + off, d, 1, N, d);  // K̂: d columns of N
      float* C = pc + p * d * d;
      gemm(true, false, d, d, N, pkh + off, pv + off, 0.f, C);  // Ctx = K̂ᵀ v  (d, d)
      gemm(false, false, N, d, d, pqh + off, C, 0.f, po + off);  // O = Q̂ Ctx   (N, d)
    }
  });
  if (exp_calls) *exp_calls += 2 * BH * N * d;

  if (needs_grad(q, k, v))
    attach_grad_fn(out, "efficient_attention", {q, k, v},
                   [vs = v.detach(), qh, kh, ctx, rq = q.requires_grad(), rk = k.requires_grad(),
                    rv = v.requires_grad(), BH, N, d, grain](const Tensor& g) -> Grads {
      // g (B, h, N, d) -> dq, dk, dv (B, h, N, d)
      Tensor dq = rq ? empty(qh.shape()) : Tensor(), dk = rk ? empty(qh.shape()) : Tensor(),
             dv = rv ? empty(qh.shape()) : Tensor();
      const float *pg = g.data(), *pv = vs.data(), *pqh = qh.data(), *pkh = kh.data(), *pc = ctx.data();
      parallel_for(BH, grain, [&](int64_t p0, int64_t p1) {
        Tensor dctx_t = empty({d, d});
        float* dctx = dctx_t.data();
        for (int64_t p = p0; p < p1; ++p) {
          const int64_t off = p * N * d;
          const float *G = pg + off, *Qh = pqh + off, *Kh = pkh + off, *C = pc + p * d * d;
          if (rq) {
            float* dQ = dq.data() + off;
            gemm(false, true, N, d, d, G, C, 0.f, dQ);          // dQ̂ = G Ctxᵀ  (N, d)
            softmax_backward_strided(Qh, dQ, N, d, d, 1);       // dq, per row
          }
          if (!rk && !rv) continue;
          gemm(true, false, d, d, N, Qh, G, 0.f, dctx);         // dCtx = Q̂ᵀ G  (d, d)
          if (rk) {
            float* dK = dk.data() + off;
            gemm(false, true, N, d, d, pv + off, dctx, 0.f, dK);  // dK̂ = v dCtxᵀ (N, d)
            softmax_backward_strided(Kh, dK, d, 1, N, d);         // dk, per column
          }
          if (rv) gemm(false, false, N, d, d, Kh, dctx, 0.f, dv.data() + off);  // dv = K̂ dCtx
        }
      });
      return {dq, dk, dv};
    });
  return out;
}

// ---- the module -------------------------------------------------------------------

EfficientAttention::EfficientAttention(const AttentionOptions& opt) : Attention(opt, "EfficientAttention") {
  check(opt.attn_drop == 0.f, "EfficientAttention: attn_drop ", opt.attn_drop,
        " is not supported (the official module has no attention dropout and forms no attention "
        "matrix); use 0");
}

Tensor EfficientAttention::core(const Tensor& q, const Tensor& k, const Tensor& v, int64_t, int64_t) {
  if (qk_hook) qk_hook(q, k);
  return efficient_attention(q, k, v, &exp_calls_);
}

}  // namespace sima
