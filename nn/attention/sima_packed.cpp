// SimA's core read in place from the qkv Linear's output: no head copies, in training too.
//
// qkv (B, N, 3C) is read as q, k, v with row stride ld = 3C (head j of q at column j·d, of k at
// C + j·d, of v at 2C + j·d); out (B, N, C) is written with the heads merged (row stride C).
// The math per (batch, head) pair is sima_attention's (sima.cpp), only the strides differ:
//   q̂ = colnorm(q), k̂ = colnorm(k)
//   qk_first: A = q̂ k̂ᵀ (N×N),  out = A v
//   kv_first: M = k̂ᵀ v (d×d),  out = q̂ M
// Backward, from g = dL/dout (B, N, C) -> dqkv (B, N, 3C), each pair writing its own columns:
//   qk_first: A recomputed, dv = Aᵀ g, dA = g vᵀ, dq̂ = dA k̂, dk̂ = dAᵀ q̂
//   kv_first: dq̂ = g Mᵀ, dM = q̂ᵀ g (d×d), dk̂ = v dMᵀ, dv = k̂ dM
//   dq, dk from dq̂, dk̂ in place through the normalisation backward (column_norm.h).
// Against split heads + sima_attention + merged heads, this skips the permute copy of qkv into
// (3, B, h, N, d), the merge copy of the output, and in the backward their two copies back, the
// zero-filled (3, B, h, N, d) gradient of each of q, k, v and the two sums of those.
// Saved for backward: qkv itself (the Linear's output), the column norms (B·h, 2, d) and for
// kv_first M (B·h, d, d); q̂, k̂ and A are recomputed.
#include <cmath>

#include "core/autograd.h"
#include "core/error.h"
#include "core/flops.h"
#include "core/ops/gemm.h"
#include "core/parallel.h"
#include "nn/attention/sima.h"
#include "nn/attention/sima_column_norm.h"

namespace sima {

namespace {

struct Packed {  // the layout of one call: B batches, `heads` heads of width d, C = heads·d
  int64_t B, N, C, heads, d, ld;  // ld = 3C, the row stride of qkv and dqkv
  ColumnNorm cn;
  float eps;
  bool qk_first;
  int64_t pairs() const { return B * heads; }
  int64_t qkv_offset(int64_t p) const { return (p / heads) * N * ld + (p % heads) * d; }  // q's first element
  int64_t out_offset(int64_t p) const { return (p / heads) * N * C + (p % heads) * d; }
  int64_t work() const { return qk_first ? N * N * d : 2 * N * d * d; }  // forward multiply-adds per pair
};

// dqkv (B, N, 3C) from g (B, N, C); norms (pairs, 2, d) and M (pairs, d, d) from the forward.
Tensor packed_backward(const Packed& L, const Tensor& qkv, const Tensor& norms, const Tensor& M, const Tensor& g) {
  Tensor dqkv = empty(qkv.shape());
  const float *pqkv = qkv.data(), *pg = g.data(), *pn = norms.data(), *pM = L.qk_first ? nullptr : M.data();
  float* pd = dqkv.data();
  const int64_t N = L.N, C = L.C, d = L.d, ld = L.ld;
  parallel_for(L.pairs(), grain_for(kGemmGrain, L.work()), [&](int64_t p0, int64_t p1) {
    // scratch per chunk: q̂, k̂ (N×d each), then A/dA (N×N) or dM (d×d)
    Tensor scratch = empty({2 * N * d + (L.qk_first ? N * N : d * d)});
    float *qh = scratch.data(), *kh = qh + N * d, *S = kh + N * d;
    for (int64_t p = p0; p < p1; ++p) {
      const float* q = pqkv + L.qkv_offset(p);  // k at + C, v at + 2C (row stride ld)
      const float* v = q + 2 * C;
      const float* gp = pg + L.out_offset(p);   // row stride C
      float *dq = pd + L.qkv_offset(p), *dk = dq + C, *dv = dq + 2 * C;
      const float* n = pn + p * 2 * d;          // q's norms, then k's
      column_scale(q, n, qh, N, d, L.cn, L.eps, ld);       // q̂
      column_scale(q + C, n + d, kh, N, d, L.cn, L.eps, ld);  // k̂
      if (L.qk_first) {
        gemm_block(false, true, N, N, d, qh, d, kh, d, 0.f, S, N);     // A = q̂ k̂ᵀ, recomputed
        gemm_block(true, false, N, d, N, S, N, gp, C, 0.f, dv, ld);    // dv = Aᵀ g
        gemm_block(false, true, N, N, d, gp, C, v, ld, 0.f, S, N);     // dA = g vᵀ
        gemm_block(false, false, N, d, N, S, N, kh, d, 0.f, dq, ld);   // dq̂ = dA k̂
        gemm_block(true, false, N, d, N, S, N, qh, d, 0.f, dk, ld);    // dk̂ = dAᵀ q̂
      } else {
        const float* Mp = pM + p * d * d;
        gemm_block(false, true, N, d, d, gp, C, Mp, d, 0.f, dq, ld);   // dq̂ = g Mᵀ
        gemm_block(true, false, d, d, N, qh, d, gp, C, 0.f, S, d);     // dM = q̂ᵀ g
        gemm_block(false, true, N, d, d, v, ld, S, d, 0.f, dk, ld);    // dk̂ = v dMᵀ
        gemm_block(false, false, N, d, d, kh, d, S, d, 0.f, dv, ld);   // dv = k̂ dM
      }
      column_normalize_backward(dq, q, n, dq, N, d, L.cn, L.eps, ld);          // dq̂ -> dq
      column_normalize_backward(dk, q + C, n + d, dk, N, d, L.cn, L.eps, ld);  // dk̂ -> dk
    }
  });
  count_gemm_flops(L.pairs() * 2 * (L.qk_first ? 5 * N * N * d : 4 * N * d * d));
  return dqkv;
}

}  // namespace

Tensor sima_attention_packed(const Tensor& qkv, int64_t heads, SimaNorm norm, SimaOrder order, float eps) {
  check_sima_packed_inputs("sima_attention_packed", qkv, heads, eps);
  Packed L{qkv.size(0), qkv.size(1), qkv.size(2) / 3, heads, qkv.size(2) / 3 / heads, qkv.size(2),
           column_norm(norm), eps, false};
  L.qk_first = resolve_sima_order(order, L.N, L.d) == SimaOrder::QkFirst;
  const bool grad = needs_grad(qkv);
  const int64_t N = L.N, C = L.C, d = L.d, ld = L.ld;
  Tensor out = empty({L.B, N, C});
  // With a gradient the norms and M are kept for the backward; without, they live in scratch.
  Tensor norms = grad ? empty({L.pairs(), 2, d}) : Tensor();
  Tensor M = grad && !L.qk_first ? empty({L.pairs(), d, d}) : Tensor();
  const float* pqkv = qkv.data();
  float* po = out.data();
  parallel_for(L.pairs(), grain_for(kGemmGrain, L.work()), [&](int64_t p0, int64_t p1) {
    // scratch per chunk: q̂, k̂ (N×d each), the norms (2d), then A (N×N) or M (d×d)
    Tensor scratch = empty({2 * N * d + 2 * d + (L.qk_first ? N * N : d * d)});
    float *qh = scratch.data(), *kh = qh + N * d, *AM = kh + N * d + 2 * d;
    for (int64_t p = p0; p < p1; ++p) {
      const float* q = pqkv + L.qkv_offset(p);  // k at + C, v at + 2C (row stride ld)
      float* op = po + L.out_offset(p);
      float* n = grad ? norms.data() + p * 2 * d : kh + N * d;
      float* Mp = M.defined() ? M.data() + p * d * d : AM;
      column_normalize(q, qh, n, N, d, L.cn, eps, ld);
      column_normalize(q + C, kh, n + d, N, d, L.cn, eps, ld);
      if (L.qk_first) {
        gemm_block(false, true, N, N, d, qh, d, kh, d, 0.f, AM, N);         // A = q̂ k̂ᵀ
        gemm_block(false, false, N, d, N, AM, N, q + 2 * C, ld, 0.f, op, C);  // out = A v
      } else {
        gemm_block(true, false, d, d, N, kh, d, q + 2 * C, ld, 0.f, Mp, d);  // M = k̂ᵀ v
        gemm_block(false, false, N, d, d, qh, d, Mp, d, 0.f, op, C);         // out = q̂ M
      }
    }
  });
  count_gemm_flops(L.pairs() * 2 * (L.qk_first ? 2 * N * N * d : 2 * N * d * d));
  if (grad)
    attach_grad_fn(out, "sima_attention_packed", {qkv},
                   [L, qkv_saved = qkv.detach(), norms, M](const Tensor& g) -> Grads {
                     return {packed_backward(L, qkv_saved, norms, M, g)};
                   });
  return out;
}

}  // namespace sima
