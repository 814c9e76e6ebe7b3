// SimA's core for inference: the normalisation folded into one scale per channel.
//
// Per (batch, head) pair, with r = max(n, eps) the clamped column norms of q (over its N tokens)
// and of k (over its N_kv tokens), the attention only ever uses q̂ k̂ᵀ, and
//   q̂ k̂ᵀ = Σ_c q[:, c] k[:, c]ᵀ / (r_q,c · r_k,c),
// so each channel c needs one scale, applied once, where it is cheapest:
//   kv_first: M = kᵀ v (d×d) read in place,  row c of M times (1/r_k,c)(1/r_q,c),  out = q M
//   qk_first: k̃ = k ⊙ (1/r_k)(1/r_q) per column (N_kv×d),  A = q k̃ᵀ (N×N_kv),  out = A v
// Training (sima_attention, sima_attention_packed) writes q̂ and k̂ instead: 2·N·d divisions and
// stores per pair, which at N ≈ d cost as much as softmax's exponentials (docs/performance.md §3).
// Here q is never written, and k only for qk_first. The two reciprocals are applied one after
// the other, not as one product 1/(r_q r_k), so no intermediate leaves float's normal range
// where the training path's q̂, k̂ would not. The results equal the training path's to float
// rounding (a product by a reciprocal where it divides), not bit for bit: this path runs only
// once a model is set up for inference (set_inference_precision, pack_fp32_inference), never in
// the training loop's evaluations.
#include <algorithm>
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

// Where one pair's operands live: q N×d, k and v N_kv×d, out N×d, each with its row stride.
struct PairLayout {
  int64_t N, Nkv, d;
  int64_t ldq, ldk, ldv, ldo;
  ColumnNorm cn;
  float eps;
  bool qk_first;
  int64_t scratch() const { return 2 * d + (qk_first ? Nkv * d + N * Nkv : d * d); }
  int64_t work() const { return qk_first ? 2 * N * Nkv * d : (Nkv + N) * d * d; }  // multiply-adds
};

// out = q̂ k̂ᵀ v for one pair; buf holds L.scratch() floats.
void sima_pair(const PairLayout& L, const float* q, const float* k, const float* v, float* out, float* buf) {
  const int64_t N = L.N, Nkv = L.Nkv, d = L.d;
  float *iq = buf, *ik = buf + d, *work = buf + 2 * d;  // 1/r_q, 1/r_k, then k̃ and A, or M
  if (L.cn == ColumnNorm::None) {
    std::fill(iq, iq + 2 * d, 1.f);
  } else {
    column_norms(q, iq, N, d, L.cn, L.ldq);
    column_norms(k, ik, Nkv, d, L.cn, L.ldk);
    for (int64_t c = 0; c < 2 * d; ++c) iq[c] = 1.f / std::max(iq[c], L.eps);
  }
  if (L.qk_first) {
    float *kt = work, *A = work + Nkv * d;
    for (int64_t j = 0; j < Nkv; ++j) {
      const float* kj = k + j * L.ldk;
      float* ktj = kt + j * d;
      for (int64_t c = 0; c < d; ++c) ktj[c] = kj[c] * ik[c] * iq[c];  // (k / r_k) / r_q
    }
    gemm_block(false, true, N, Nkv, d, q, L.ldq, kt, d, 0.f, A, Nkv);  // A = q k̃ᵀ
    gemm_block(false, false, N, d, Nkv, A, Nkv, v, L.ldv, 0.f, out, L.ldo);  // out = A v
  } else {
    float* M = work;
    gemm_block(true, false, d, d, Nkv, k, L.ldk, v, L.ldv, 0.f, M, d);  // M = kᵀ v
    for (int64_t c = 0; c < d; ++c) {
      const float s = ik[c];
      const float t = iq[c];
      float* Mc = M + c * d;
      for (int64_t e = 0; e < d; ++e) Mc[e] = Mc[e] * s * t;  // row c: (kᵀ v / r_k) / r_q
    }
    gemm_block(false, false, N, d, d, q, L.ldq, M, d, 0.f, out, L.ldo);  // out = q M
  }
}

void check_no_grad(const char* who, bool grad) {
  check(!grad, who, ": inference only (it records no graph); with a gradient use the training core");
}

}  // namespace

Tensor sima_attention_packed_inference(const Tensor& qkv, int64_t heads, SimaNorm norm, SimaOrder order, float eps) {
  check_sima_packed_inputs("sima_attention_packed_inference", qkv, heads, eps);
  check_no_grad("sima_attention_packed_inference", needs_grad(qkv));
  const int64_t B = qkv.size(0), N = qkv.size(1), C = qkv.size(2) / 3, d = C / heads, ld = 3 * C;
  const PairLayout L{N, N, d, ld, ld, ld, C, column_norm(norm), eps,
                     resolve_sima_order(order, N, d) == SimaOrder::QkFirst};
  Tensor out = empty({B, N, C});
  const float* pqkv = qkv.data();
  float* po = out.data();
  parallel_for(B * heads, grain_for(kGemmGrain, L.work()), [&](int64_t p0, int64_t p1) {
    Tensor buf = empty({L.scratch()});
    for (int64_t p = p0; p < p1; ++p) {
      const float* q = pqkv + (p / heads) * N * ld + (p % heads) * d;  // k at + C, v at + 2C
      sima_pair(L, q, q + C, q + 2 * C, po + (p / heads) * N * C + (p % heads) * d, buf.data());
    }
  });
  count_gemm_flops(B * heads * 2 * L.work());
  return out;
}

Tensor sima_attention_inference(const Tensor& q, const Tensor& k, const Tensor& v, SimaNorm norm, SimaOrder order,
                                float eps) {
  check_sima_inputs("sima_attention_inference", q, k, v, eps);
  check_no_grad("sima_attention_inference", needs_grad(q, k, v));
  const int64_t pairs = q.size(0) * q.size(1), N = q.size(2), Nkv = k.size(2), d = q.size(3);
  const PairLayout L{N, Nkv, d, d, d, d, d, column_norm(norm), eps,
                     resolve_sima_order(order, N, d) == SimaOrder::QkFirst};
  Tensor out = empty(q.shape());
  parallel_for(pairs, grain_for(kGemmGrain, L.work()), [&](int64_t p0, int64_t p1) {
    Tensor buf = empty({L.scratch()});
    for (int64_t p = p0; p < p1; ++p)
      sima_pair(L, q.data() + p * N * d, k.data() + p * Nkv * d, v.data() + p * Nkv * d, out.data() + p * N * d,
                buf.data());
  });
  count_gemm_flops(pairs * 2 * L.work());
  return out;
}

}  // namespace sima
