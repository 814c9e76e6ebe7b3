// Softmax attention, one fused node: forward kernel and hand-derived backward.
//
// Per (batch, head) pair, with Nq queries, Nk keys, scale s (d^-½ for ViT):
//
//   S  = q kᵀ                       (Nq, Nk)   one sgemm
//   P  = softmax(s · S) over keys   (Nq, Nk)   Nq·Nk exp() calls
//   Pd = P ⊙ M                      (Nq, Nk)   M: dropout mask of 0 and 1/(1-p), or 1
//   o  = Pd v                       (Nq, dv)   one sgemm
//
// Backward, from dO (Nq, dv):
//   dv  = Pdᵀ dO                    (Nk, dv)
//   dPd = dO vᵀ                     (Nq, Nk)
//   dP  = dPd ⊙ M
//   dS  = s · P ⊙ (dP − rowsum(dP ⊙ P))       the softmax Jacobian y(δ − y) per row,
//                                              times the scale of its input s·S
//   dq  = dS k                      (Nq, d)    S = q kᵀ => dq = dS k, dk = dSᵀ q
//   dk  = dSᵀ q                     (Nk, d)
//
// Saved for backward: q, k, v (views the caller keeps alive anyway), P (B, h, Nq, Nk) and
// the mask M (same shape, only when dropout is active). Saving P costs B·h·N² floats, the
// same as PyTorch's saved attention matrix; recomputing it would repeat the q kᵀ sgemm and
// the N² exps of the forward.
//
// Pairs run in parallel (parallel_for, one sgemm per matrix: OpenBLAS-OpenMP runs
// single-threaded inside the region); each pair writes only its own slices, so the result
// does not depend on the thread count. The mask is drawn serially before the loop.
#include "nn/attention/softmax_attention.h"

#include <atomic>
#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops/gemm.h"
#include "core/ops/vmath.h"
#include "core/parallel.h"

namespace sima {

namespace {

// Row softmax of s·S in place over rows of n: returns the number of exp() calls.
int64_t softmax_rows(float* S, int64_t rows, int64_t n, float scale) {
  for (int64_t r = 0; r < rows; ++r) {
    float* x = S + r * n;
    float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
    for (int64_t j = 0; j < n; ++j) {
      x[j] *= scale;
      m = x[j] > m ? x[j] : m;
    }
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < n; ++j) {
      x[j] = exp_fast(x[j] - m);
      sum += x[j];
    }
    const float inv = 1.f / sum;
    for (int64_t j = 0; j < n; ++j) x[j] *= inv;
  }
  return rows * n;
}

// dP -> dS in place over rows of n, P the forward's softmax: dS = s · P ⊙ (dP − rowsum(dP ⊙ P)).
void softmax_rows_backward(float* dP, const float* P, int64_t rows, int64_t n, float scale) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* pr = P + r * n;
    float* gr = dP + r * n;
    float dot = 0.f;
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j < n; ++j) dot += gr[j] * pr[j];
    for (int64_t j = 0; j < n; ++j) gr[j] = scale * pr[j] * (gr[j] - dot);
  }
}

// The sizes of a call: B·h pairs of Nq queries, Nk keys, q/k width d, v width dv.
struct Dims {
  int64_t B, h, Nq, Nk, d, dv;
  int64_t pairs() const { return B * h; }
  int64_t nn() const { return Nq * Nk; }
};

// The tensors a call reads and writes (null where absent). P: the saved softmax (B, h, Nq, Nk),
// or null when there is no backward (then each chunk reuses one matrix).
struct Buffers {
  const float *q, *k, *v, *mask;
  float *P, *o;
};

// Forward of every pair (the table at the top); returns the exp() calls.
int64_t forward_kernel(const Dims& D, const Buffers& b, float scale) {
  const int64_t Nq = D.Nq, Nk = D.Nk, d = D.d, dv = D.dv, nn = D.nn();
  std::atomic<int64_t> exps{0};
  parallel_for(D.pairs(), grain_for(kGemmGrain, nn * (d + dv)), [&](int64_t i0, int64_t i1) {
    Tensor buf = b.mask ? empty({Nq, Nk}) : Tensor();  // Pd = P ⊙ M
    Tensor Pbuf = b.P ? Tensor() : empty({Nq, Nk});    // P when it is not saved
    int64_t local_exps = 0;
    for (int64_t i = i0; i < i1; ++i) {
      float* Pi = b.P ? b.P + i * nn : Pbuf.data();
      gemm(false, true, Nq, Nk, d, b.q + i * Nq * d, b.k + i * Nk * d, 0.f, Pi);  // S = q kᵀ
      local_exps += softmax_rows(Pi, Nq, Nk, scale);
      const float* A = Pi;
      if (b.mask) {
        const float* Mi = b.mask + i * nn;
        float* pd = buf.data();
        for (int64_t j = 0; j < nn; ++j) pd[j] = Pi[j] * Mi[j];
        A = pd;
      }
      gemm(false, false, Nq, dv, Nk, A, b.v + i * Nk * dv, 0.f, b.o + i * Nq * dv);  // o = Pd v
    }
    exps += local_exps;
  });
  return exps.load();
}

// Gradients to fill (null: not wanted).
struct GradBuffers {
  float *dq, *dk, *dv;
};

// Backward of every pair from gO (B, h, Nq, dv): the table at the top (derivation:
// docs/derivations/softmax_attention.md).
void backward_kernel(const Dims& D, const Buffers& b, const float* pg, const GradBuffers& r, float scale) {
  const int64_t Nq = D.Nq, Nk = D.Nk, d = D.d, dv = D.dv, nn = D.nn();
  parallel_for(D.pairs(), grain_for(kGemmGrain, nn * (2 * d + 2 * dv)), [&](int64_t i0, int64_t i1) {
    Tensor dP = empty({Nq, Nk}), Pd = b.mask && r.dv ? empty({Nq, Nk}) : Tensor();
    float* dp = dP.data();
    for (int64_t i = i0; i < i1; ++i) {
      const float *Pi = b.P + i * nn, *Mi = b.mask ? b.mask + i * nn : nullptr, *gi = pg + i * Nq * dv;
      if (r.dv) {  // dv = Pdᵀ dO
        const float* A = Pi;
        if (Mi) {
          float* pd = Pd.data();
          for (int64_t j = 0; j < nn; ++j) pd[j] = Pi[j] * Mi[j];
          A = pd;
        }
        gemm(true, false, Nk, dv, Nq, A, gi, 0.f, r.dv + i * Nk * dv);
      }
      if (!r.dq && !r.dk) continue;
      gemm(false, true, Nq, Nk, dv, gi, b.v + i * Nk * dv, 0.f, dp);  // dPd = dO vᵀ
      if (Mi)
        for (int64_t j = 0; j < nn; ++j) dp[j] *= Mi[j];  // dP = dPd ⊙ M
      softmax_rows_backward(dp, Pi, Nq, Nk, scale);  // dS = s · P ⊙ (dP − rowsum(dP ⊙ P))
      if (r.dq) gemm(false, false, Nq, d, Nk, dp, b.k + i * Nk * d, 0.f, r.dq + i * Nq * d);  // dS k
      if (r.dk) gemm(true, false, Nk, d, Nq, dp, b.q + i * Nq * d, 0.f, r.dk + i * Nk * d);   // dSᵀ q
    }
  });
}

}  // namespace

// q (B, h, Nq, d), k (B, h, Nk, d), v (B, h, Nk, dv) -> o (B, h, Nq, dv).
Tensor softmax_attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                         float attn_drop, bool training, Generator& gen, int64_t* exp_calls) {
  check(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
        "softmax_attention: q, k, v must be (B, h, N, d), got q ", q.shape(), ", k ", k.shape(),
        ", v ", v.shape());
  const Dims D{q.size(0), q.size(1), q.size(2), k.size(2), q.size(3), v.size(3)};
  check(k.size(0) == D.B && k.size(1) == D.h && k.size(3) == D.d && v.size(0) == D.B && v.size(1) == D.h &&
            v.size(2) == D.Nk,
        "softmax_attention: q ", q.shape(), ", k ", k.shape(), ", v ", v.shape(),
        " do not match (need q (B, h, Nq, d), k (B, h, Nk, d), v (B, h, Nk, dv))");
  check(D.Nk > 0, "softmax_attention: no keys to attend to (k ", k.shape(), ")");
  check(scale > 0.f, "softmax_attention: scale must be positive, got ", scale);
  check(attn_drop >= 0.f && attn_drop < 1.f, "softmax_attention: attn_drop must be in [0, 1), got ",
        attn_drop);

  // P is kept for the backward only when there will be one.
  const bool save = needs_grad(q, k, v);
  Tensor o = empty({D.B, D.h, D.Nq, D.dv}), P = save ? empty({D.B, D.h, D.Nq, D.Nk}) : Tensor();
  // Dropout mask, drawn serially (same numbers at any thread count, same as F.dropout).
  Tensor mask;
  if (training && attn_drop > 0.f) {
    mask = empty({D.B, D.h, D.Nq, D.Nk});
    const float keep_scale = 1.f / (1.f - attn_drop);
    float* pm = mask.data();
    for (int64_t i = 0; i < D.pairs() * D.nn(); ++i) pm[i] = gen.uniform() >= attn_drop ? keep_scale : 0.f;
  }
  const Buffers b{q.data(), k.data(), v.data(), mask.defined() ? mask.data() : nullptr,
                  save ? P.data() : nullptr, o.data()};
  const int64_t exps = forward_kernel(D, b, scale);
  if (exp_calls) *exp_calls += exps;

  if (save) {
    attach_grad_fn(o, "softmax_attention", {q, k, v},
                   [qs = q.detach(), ks = k.detach(), vs = v.detach(), P, mask, scale, D,
                    rq = q.requires_grad(), rk = k.requires_grad(),
                    rv = v.requires_grad()](const Tensor& gO) -> Grads {
      // gO (B, h, Nq, dv) -> dq (B, h, Nq, d), dk (B, h, Nk, d), dv (B, h, Nk, dv).
      Tensor dq = rq ? empty(qs.shape()) : Tensor(), dk = rk ? empty(ks.shape()) : Tensor(),
             dvt = rv ? empty(vs.shape()) : Tensor();
      const Buffers b{qs.data(), ks.data(), vs.data(), mask.defined() ? mask.data() : nullptr, P.data(), nullptr};
      backward_kernel(D, b, gO.data(), {rq ? dq.data() : nullptr, rk ? dk.data() : nullptr, rv ? dvt.data() : nullptr},
                      scale);
      return {dq, dk, dvt};
    });
  }
  return o;
}

// The packed core (no head copies), from qkv (B, N, 3C) read in place (row stride ld = 3C) to
// o (B, N, C) with the heads merged; with a gradient P is saved (B·h, N, N) and the backward
// writes dq, dk, dv in place into one dqkv (B, N, 3C), the same products as above:
//   dv = Pᵀ dO,  dP = dO vᵀ,  dS = s · P ⊙ (dP − rowsum(dP ⊙ P)),  dq = dS k,  dk = dSᵀ q
Tensor softmax_attention_packed(const Tensor& qkv, int64_t heads, float scale, int64_t* exp_calls) {
  check(qkv.dim() == 3 && heads > 0 && qkv.size(2) % (3 * heads) == 0, "softmax_attention_packed: qkv ",
        qkv.shape(), " must be (B, N, 3C) with C divisible by ", heads, " heads");
  check(scale > 0.f, "softmax_attention_packed: scale must be positive, got ", scale);
  const int64_t B = qkv.size(0), N = qkv.size(1), C = qkv.size(2) / 3, d = C / heads, ld = 3 * C, nn = N * N;
  check(N > 0, "softmax_attention_packed: no tokens (qkv ", qkv.shape(), ")");
  const bool save = needs_grad(qkv);
  Tensor o = empty({B, N, C}), P = save ? empty({B * heads, N, N}) : Tensor();
  const float* pqkv = qkv.data();
  float* po = o.data();
  // Pair i = (b, head): q at row stride 3C from b·N·3C + head·d, k C further, v 2C further.
  auto q_of = [=](int64_t i) { return (i / heads) * N * ld + (i % heads) * d; };
  auto o_of = [=](int64_t i) { return (i / heads) * N * C + (i % heads) * d; };
  parallel_for(B * heads, grain_for(kGemmGrain, nn * 2 * d), [&](int64_t i0, int64_t i1) {
    Tensor Pbuf = save ? Tensor() : empty({N, N});  // P when it is not saved
    for (int64_t i = i0; i < i1; ++i) {
      const float* q = pqkv + q_of(i);
      float* Pi = save ? P.data() + i * nn : Pbuf.data();
      gemm_block(false, true, N, N, d, q, ld, q + C, ld, 0.f, Pi, N);  // S = q kᵀ
      softmax_rows(Pi, N, N, scale);
      gemm_block(false, false, N, d, N, Pi, N, q + 2 * C, ld, 0.f, po + o_of(i), C);  // o = P v
    }
  });
  count_gemm_flops(B * heads * 4 * nn * d);
  if (exp_calls) *exp_calls += B * heads * nn;
  if (save)
    attach_grad_fn(o, "softmax_attention_packed", {qkv},
                   [qs = qkv.detach(), P, scale, heads, N, C, d, ld, nn, q_of, o_of](const Tensor& gO) -> Grads {
      Tensor dqkv = empty(qs.shape());
      const float *pqkv = qs.data(), *pP = P.data(), *pg = gO.data();
      float* pd = dqkv.data();
      const int64_t pairs = qs.size(0) * heads;
      parallel_for(pairs, grain_for(kGemmGrain, nn * 4 * d), [&](int64_t i0, int64_t i1) {
        Tensor dP = empty({N, N});
        float* dp = dP.data();
        for (int64_t i = i0; i < i1; ++i) {
          const float *q = pqkv + q_of(i), *Pi = pP + i * nn, *g = pg + o_of(i);  // g: row stride C
          float* dq = pd + q_of(i);  // dk at + C, dv at + 2C (row stride ld)
          gemm_block(true, false, N, d, N, Pi, N, g, C, 0.f, dq + 2 * C, ld);  // dv = Pᵀ dO
          gemm_block(false, true, N, N, d, g, C, q + 2 * C, ld, 0.f, dp, N);   // dP = dO vᵀ
          softmax_rows_backward(dp, Pi, N, N, scale);                                   // dS
          gemm_block(false, false, N, d, N, dp, N, q + C, ld, 0.f, dq, ld);    // dq = dS k
          gemm_block(true, false, N, d, N, dp, N, q, ld, 0.f, dq + C, ld);     // dk = dSᵀ q
        }
      });
      count_gemm_flops(pairs * 8 * nn * d);
      return {dqkv};
    });
  return o;
}

SoftmaxAttention::SoftmaxAttention(const AttentionOptions& opt) : Attention(opt, "SoftmaxAttention") {}

Tensor SoftmaxAttention::core(const Tensor& q, const Tensor& k, const Tensor& v, int64_t, int64_t) {
  if (qk_hook) qk_hook(q, k);
  return softmax_attention(q, k, v, softmax_scale(), opt_.attn_drop, is_training(), rng(RngStream::Dropout),
                           &exp_calls_);
}

Tensor SoftmaxAttention::packed_core(const Tensor& qkv_out) {
  if (qk_hook || (is_training() && opt_.attn_drop > 0.f)) return Tensor();  // hook, dropout: split heads
  return softmax_attention_packed(qkv_out, opt_.num_heads, softmax_scale(), &exp_calls_);
}

}  // namespace sima
