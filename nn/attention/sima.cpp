// SimA attention: the fused core (normalisation + two products) and its hand-derived backward.
//
// Per (batch, head) pair, q (N×d), k, v (Nk×d), all row-major slices of the (B, h, ·, d) inputs:
//   q̂ = colnorm(q), k̂ = colnorm(k)                 (column_norm.h, forward and backward)
//   qk_first: A = q̂ k̂ᵀ (N×Nk),  out = A v
//   kv_first: M = k̂ᵀ v (d×d),   out = q̂ M
// The pairs are independent: one parallel_for over them, one single-threaded sgemm per product.
#include "nn/attention/sima.h"

#include <algorithm>
#include <cmath>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops/gemm.h"
#include "core/parallel.h"
#include "nn/attention/sima_column_norm.h"
#include "nn/attention/variants.h"

namespace sima {

const std::vector<std::string>& sima_norm_names() {
  static const std::vector<std::string> names = {"l1", "l2", "none"};  // SimaNorm's order
  return names;
}

const std::vector<std::string>& sima_order_names() {
  static const std::vector<std::string> names = {"auto", "qk_first", "kv_first"};  // SimaOrder's order
  return names;
}

namespace {

// The index of s in names, or a sima::Error "<who>: <option> must be one of ... (got 's')".
int word_index(const std::vector<std::string>& names, const std::string& s, const std::string& who,
               const char* option) {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == s) return int(i);
  std::string allowed;
  for (const auto& n : names) allowed += (allowed.empty() ? "" : ", ") + n;
  fail(who, ": ", option, " must be one of ", allowed, " (got '", s, "')");
}

}  // namespace

SimaNorm parse_sima_norm(const std::string& s, const std::string& who) {
  return SimaNorm(word_index(sima_norm_names(), s, who, "norm"));
}

SimaOrder parse_sima_order(const std::string& s, const std::string& who) {
  return SimaOrder(word_index(sima_order_names(), s, who, "order"));
}

SimaOrder resolve_sima_order(SimaOrder order, int64_t N, int64_t d) {
  if (order != SimaOrder::Auto) return order;
  return N < d ? SimaOrder::QkFirst : SimaOrder::KvFirst;
}

namespace {

// The sizes and options of one call; the (batch, head) pairs are independent.
struct Dims {
  int64_t B, h, N, Nk, d;
  ColumnNorm cn;
  float eps;
  bool qk_first;
  int64_t pairs() const { return B * h; }
  int64_t grain() const {  // multiply-adds per pair -> pairs per task
    return grain_for(kGemmGrain, qk_first ? N * Nk * d : (N + Nk) * d * d);
  }
};

// The tensors of one call as raw pointers: q (B, h, N, d), k, v (B, h, Nk, d), the column norms
// qn, kn (B, h, d) and, for kv_first, M = k̂ᵀ v (B, h, d, d) (null for qk_first). The forward
// writes qn, kn and M, the backward reads them.
struct Buffers {
  const float *q, *k, *v;
  float *qn, *kn, *M;
};

// out (B, h, N, d) = colnorm(q) colnorm(k)ᵀ v per pair, in the order D.qk_first says; q̂, k̂ also
// go to qh (B, h, N, d), kh (B, h, Nk, d) when not null, else to per-chunk scratch.
void forward_kernel(const Dims& D, const Buffers& b, float* qh, float* kh, float* out) {
  const int64_t N = D.N, Nk = D.Nk, d = D.d;
  const bool keep_hat = qh != nullptr;
  parallel_for(D.pairs(), D.grain(), [&](int64_t p0, int64_t p1) {
    // scratch per chunk: q̂ (N×d) and k̂ (Nk×d) unless kept, then A (N×Nk) for qk_first
    const int64_t hat = keep_hat ? 0 : (N + Nk) * d;
    Tensor scratch = empty({std::max<int64_t>(1, hat + (D.qk_first ? N * Nk : 0))});
    float* A = scratch.data() + hat;
    for (int64_t p = p0; p < p1; ++p) {
      const float* vp = b.v + p * Nk * d;
      float* qhp = keep_hat ? qh + p * N * d : scratch.data();
      float* khp = keep_hat ? kh + p * Nk * d : scratch.data() + N * d;
      float* op = out + p * N * d;
      column_normalize(b.q + p * N * d, qhp, b.qn + p * d, N, d, D.cn, D.eps);
      column_normalize(b.k + p * Nk * d, khp, b.kn + p * d, Nk, d, D.cn, D.eps);
      if (D.qk_first) {
        gemm(false, true, N, Nk, d, qhp, khp, 0.f, A);  // A = q̂ k̂ᵀ     (N×Nk)
        gemm(false, false, N, d, Nk, A, vp, 0.f, op);   // out = A v     (N×d)
      } else {
        float* Mp = b.M + p * d * d;
        gemm(true, false, d, d, Nk, khp, vp, 0.f, Mp);  // M = k̂ᵀ v       (d×d)
        gemm(false, false, N, d, d, qhp, Mp, 0.f, op);  // out = q̂ M      (N×d)
      }
    }
  });
}

// Backward of forward_kernel (docs/derivations/sima.md), from g = dL/dout (B, h, N, d) into
// dq (B, h, N, d), dk, dv (B, h, Nk, d) (null: not wanted). q̂, k̂ recomputed from q, k and the
// saved norms; products next (dq̂, dk̂, dv), then dq̂ -> dq and dk̂ -> dk in place through the
// normalisation backward (column_norm.h).
//   qk_first: dA = g vᵀ (N×Nk), dv = Aᵀ g, dq̂ = dA k̂, dk̂ = dAᵀ q̂
//   kv_first: dq̂ = g Mᵀ, dM = q̂ᵀ g (d×d), dk̂ = v dMᵀ, dv = k̂ dM
void backward_kernel(const Dims& D, const Buffers& b, const float* g, float* dq, float* dk, float* dv) {
  const int64_t N = D.N, Nk = D.Nk, d = D.d;
  parallel_for(D.pairs(), D.grain(), [&](int64_t p0, int64_t p1) {
    // scratch per chunk: q̂ (N×d), k̂ (Nk×d), the N×Nk (qk_first) or d×d (kv_first) matrix
    Tensor scratch = empty({(N + Nk) * d + (D.qk_first ? N * Nk : d * d)});
    float *qhp = scratch.data(), *khp = qhp + N * d, *S = khp + Nk * d;
    for (int64_t p = p0; p < p1; ++p) {
      const float *gp = g + p * N * d, *qp = b.q + p * N * d, *kp = b.k + p * Nk * d, *vp = b.v + p * Nk * d;
      float* dqp = dq ? dq + p * N * d : nullptr;
      float* dkp = dk ? dk + p * Nk * d : nullptr;
      float* dvp = dv ? dv + p * Nk * d : nullptr;
      column_scale(qp, b.qn + p * d, qhp, N, d, D.cn, D.eps);   // q̂
      column_scale(kp, b.kn + p * d, khp, Nk, d, D.cn, D.eps);  // k̂
      if (D.qk_first) {
        if (dv) {
          gemm(false, true, N, Nk, d, qhp, khp, 0.f, S);  // A = q̂ k̂ᵀ, recomputed  (N×Nk)
          gemm(true, false, Nk, d, N, S, gp, 0.f, dvp);   // dv = Aᵀ g             (Nk×d)
        }
        if (dq || dk) gemm(false, true, N, Nk, d, gp, vp, 0.f, S);  // dA = g vᵀ  (N×Nk)
        if (dq) gemm(false, false, N, d, Nk, S, khp, 0.f, dqp);    // dq̂ = dA k̂  (N×d)
        if (dk) gemm(true, false, Nk, d, N, S, qhp, 0.f, dkp);     // dk̂ = dAᵀ q̂ (Nk×d)
      } else {
        const float* Mp = b.M + p * d * d;
        if (dq) gemm(false, true, N, d, d, gp, Mp, 0.f, dqp);      // dq̂ = g Mᵀ  (N×d)
        if (dk || dv) gemm(true, false, d, d, N, qhp, gp, 0.f, S);  // dM = q̂ᵀ g (d×d)
        if (dk) gemm(false, true, Nk, d, d, vp, S, 0.f, dkp);      // dk̂ = v dMᵀ (Nk×d)
        if (dv) gemm(false, false, Nk, d, d, khp, S, 0.f, dvp);    // dv = k̂ dM  (Nk×d)
      }
      if (dq) column_normalize_backward(dqp, qp, b.qn + p * d, dqp, N, d, D.cn, D.eps);
      if (dk) column_normalize_backward(dkp, kp, b.kn + p * d, dkp, Nk, d, D.cn, D.eps);
    }
  });
}

}  // namespace

// q (B, h, N, d), k, v (B, h, Nk, d) -> out (B, h, N, d).
// Saved for backward: q, k, v (views: in the module they share the qkv output's storage,
// alive anyway), the column norms of q and k (B, h, d), and for kv_first M = k̂ᵀ v
// (B, h, d, d). q̂, k̂ and, for qk_first, the N×Nk matrix A are recomputed, not saved.
Tensor sima_attention(const Tensor& q, const Tensor& k, const Tensor& v, SimaNorm norm,
                      SimaOrder order, float eps, Tensor* q_hat, Tensor* k_hat) {
  check_sima_inputs("sima_attention", q, k, v, eps);
  const int64_t B = q.size(0), h = q.size(1), N = q.size(2), Nk = k.size(2), d = q.size(3);
  const Dims D{B, h, N, Nk, d, column_norm(norm), eps, resolve_sima_order(order, N, d) == SimaOrder::QkFirst};
  // q̂, k̂ go to full tensors only when the caller wants them, else to per-chunk scratch.
  const bool keep_hat = q_hat || k_hat;
  Tensor qh = keep_hat ? empty(q.shape()) : Tensor(), kh = keep_hat ? empty(k.shape()) : Tensor();
  Tensor out = empty(q.shape());
  Tensor qn = empty({B, h, d}), kn = empty({B, h, d});  // column norms, before the eps clamp
  Tensor M = D.qk_first ? Tensor() : empty({B, h, d, d});
  forward_kernel(D, {q.data(), k.data(), v.data(), qn.data(), kn.data(), D.qk_first ? nullptr : M.data()},
                 keep_hat ? qh.data() : nullptr, keep_hat ? kh.data() : nullptr, out.data());
  if (q_hat) *q_hat = qh;
  if (k_hat) *k_hat = kh;

  if (needs_grad(q, k, v))
    attach_grad_fn(out, "sima_attention", {q, k, v},
                   [qs = q.detach(), ks = k.detach(), vs = v.detach(), qn, kn, M, D, rq = q.requires_grad(),
                    rk = k.requires_grad(), rv = v.requires_grad()](const Tensor& g) -> Grads {
      // g = dL/dout (B, h, N, d) -> dq (B, h, N, d), dk, dv (B, h, Nk, d)
      Tensor dq = rq ? empty(qs.shape()) : Tensor(), dk = rk ? empty(ks.shape()) : Tensor(),
             dv = rv ? empty(ks.shape()) : Tensor();
      const Buffers b{qs.data(), ks.data(), vs.data(), qn.data(), kn.data(), D.qk_first ? nullptr : M.data()};
      backward_kernel(D, b, g.data(), rq ? dq.data() : nullptr, rk ? dk.data() : nullptr, rv ? dv.data() : nullptr);
      return {dq, dk, dv};
    });
  return out;
}

// ---- the module -------------------------------------------------------------------

SimaAttention::SimaAttention(const AttentionOptions& opt)
    : Attention(opt, "SimaAttention"),
      norm_(parse_sima_norm(attention_option<std::string>(opt, "norm"))),
      order_(parse_sima_order(attention_option<std::string>(opt, "order"))),
      eps_(attention_option<float>(opt, "eps")) {
  check(eps_ > 0.f && std::isfinite(eps_), "SimaAttention: eps must be positive and finite (got ", eps_, ")");
}

Tensor SimaAttention::packed_core(const Tensor& qkv_out) {
  if (qk_hook || (int8_core && !needs_grad(qkv_out))) return Tensor();
  last_order_ = resolve_sima_order(order_, qkv_out.size(1), head_dim());
  if (inference_core && !needs_grad(qkv_out))
    return sima_attention_packed_inference(qkv_out, opt_.num_heads, norm_, last_order_, eps_);
  return sima_attention_packed(qkv_out, opt_.num_heads, norm_, last_order_, eps_);
}

Tensor SimaAttention::core(const Tensor& q, const Tensor& k, const Tensor& v, int64_t, int64_t) {
  last_order_ = resolve_sima_order(order_, q.size(2), q.size(3));
  if (!qk_hook && !needs_grad(q, k, v)) {
    if (int8_core) return sima_attention_int8(q, k, v, norm_, last_order_, eps_);
    if (inference_core) return sima_attention_inference(q, k, v, norm_, last_order_, eps_);
  }
  Tensor q_hat, k_hat;
  Tensor out = sima_attention(q, k, v, norm_, last_order_, eps_, qk_hook ? &q_hat : nullptr,
                              qk_hook ? &k_hat : nullptr);
  if (qk_hook) qk_hook(q_hat, k_hat);
  // exp_calls_ is unchanged: SimA evaluates no exp() (the paper's #exp = 0).
  return out;
}

}  // namespace sima
