// ReLU attention: out = N^-α · h(q kᵀ / √d) v, one fused node per call.
//
// Per (batch, head) pair, q, k, v (N, d), scale s = d^-½, c = N^-α:
//
//   forward                          backward (G = dL/dO, (N, d))
//   S = q kᵀ · s        (N, N)       dP = G vᵀ                  (N, N)
//   P = h(S) · c        (N, N)       dS = dP ⊙ h'(S) · c        (N, N)
//   O = P v             (N, d)       dq = dS k · s,  dk = dSᵀ q · s,  dv = Pᵀ G   (N, d)
//
// Only q, k, v are saved: the backward recomputes S (one N²d product, as cheap as the
// forward's) rather than keeping a (B, h, N, N) matrix alive between the passes.
// Each pair is independent, so pairs are split across threads and every product is
// one single-threaded sgemm; a pair's result does not depend on the thread count.
#include "nn/attention/relu_attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <type_traits>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops/activation_fns.h"
#include "core/ops/gemm.h"
#include "core/ops/norm.h"
#include "core/ops/elementwise.h"
#include "core/ops/vmath.h"
#include "core/parallel.h"
#include "nn/attention/variants.h"

namespace sima {

const std::vector<std::string>& score_fn_names() {
  static const std::vector<std::string> names = {"relu",     "relu2", "gelu",   "softplus",
                                                 "identity", "relu6", "sigmoid"};  // ScoreFn's order
  return names;
}

ScoreFn parse_score_fn(const std::string& name, const std::string& who) {
  const std::vector<std::string>& names = score_fn_names();
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return ScoreFn(i);
  fail(who, ": fn '", name, "' is not one of ", join_words(names));
}

ReluSettings relu_settings(const AttentionOptions& opt) {
  return {parse_score_fn(attention_option<std::string>(opt, "fn")), attention_option<float>(opt, "alpha"),
          attention_option<bool>(opt, "qk_norm"), attention_option<bool>(opt, "qk_norm_bias"),
          attention_option<bool>(opt, "gate")};
}

namespace {

// h as one of the shared activation structs (core/ops/activation_fns.h): Fn::f, Fn::df,
// and Fn::f_df for y = h(x) and dy = h'(x) together in the backward.
template <ScoreFn F> struct ScoreStruct;
template <> struct ScoreStruct<ScoreFn::Relu> { using type = ReluFn; };
template <> struct ScoreStruct<ScoreFn::Relu2> { using type = Relu2Fn; };
template <> struct ScoreStruct<ScoreFn::Gelu> { using type = GeluFn; };
template <> struct ScoreStruct<ScoreFn::Softplus> { using type = SoftplusFn; };
template <> struct ScoreStruct<ScoreFn::Identity> { using type = IdentityFn; };
template <> struct ScoreStruct<ScoreFn::Relu6> { using type = Relu6Fn; };
template <> struct ScoreStruct<ScoreFn::Sigmoid> { using type = SigmoidFn; };
template <ScoreFn F>
using ScoreOf = typename ScoreStruct<F>::type;

// Runs body(std::integral_constant<ScoreFn, fn>) so the row loops are compiled per h.
template <class Body>
void dispatch_score(ScoreFn fn, Body&& body) {
  using F = ScoreFn;
  switch (fn) {
    case F::Relu: return body(std::integral_constant<F, F::Relu>{});
    case F::Relu2: return body(std::integral_constant<F, F::Relu2>{});
    case F::Gelu: return body(std::integral_constant<F, F::Gelu>{});
    case F::Softplus: return body(std::integral_constant<F, F::Softplus>{});
    case F::Identity: return body(std::integral_constant<F, F::Identity>{});
    case F::Relu6: return body(std::integral_constant<F, F::Relu6>{});
    case F::Sigmoid: return body(std::integral_constant<F, F::Sigmoid>{});
  }
}

// Pairs per thread chunk: one pair once a pair is a few sgemm grains of work.
int64_t pair_grain(int64_t N, int64_t d) {
  return grain_for(kGemmGrain, N * N * d);
}

// P = c·h(s·S) in place over n scores; returns the exp() evaluations made.
// (Plain functions with restrict pointers and scalars by value, so the loops vectorise.)
template <ScoreFn F>
int64_t scores_forward(float* __restrict S, int64_t n, float s, float c) {
  if constexpr (F == ScoreFn::Softplus) {  // exp only at or below the threshold
    int64_t count = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float x = S[i] * s;
      count += !(x > SoftplusFn::kThreshold);
      S[i] = ScoreOf<F>::f(x) * c;
    }
    return count;
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) S[i] = ScoreOf<F>::f(S[i] * s) * c;
    return F == ScoreFn::Gelu || F == ScoreFn::Sigmoid ? n : 0;  // one exp per score
  }
}

// From S = q kᵀ (in P) and dP (in dS), over n scores: P = c·h(s·S) if want_p, and
// dS = dP ⊙ h'(s·S)·c·s if want_ds (the s of dq = dS k·s, dk = dSᵀ q·s folded in).
template <ScoreFn F>
void scores_backward(float* __restrict P, float* __restrict dS, int64_t n, float s, float c,
                     bool want_p, bool want_ds) {
  const float cs = c * s;
  if (want_p && want_ds) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      float dy;
      P[i] = ScoreOf<F>::f_df(P[i] * s, dy) * c;
      dS[i] *= dy * cs;
    }
  } else if (want_ds) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) dS[i] *= ScoreOf<F>::df(P[i] * s) * cs;
  } else if (want_p) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) P[i] = ScoreOf<F>::f(P[i] * s) * c;
  }
}

// O = c·h(s·q kᵀ) v for BH pairs; returns the exp() evaluations made.
template <ScoreFn F>
int64_t forward_kernel(const float* q, const float* k, const float* v, float* o, int64_t BH,
                       int64_t N, int64_t d, float s, float c) {
  std::atomic<int64_t> exps{0};
  parallel_for(BH, pair_grain(N, d), [&](int64_t p0, int64_t p1) {
    Tensor scratch = empty({N, N});  // S, then P in place
    float* S = scratch.data();
    int64_t count = 0;
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t off = p * N * d;
      gemm(false, true, N, N, d, q + off, k + off, 0.f, S);   // S = q kᵀ        (N, N)
      count += scores_forward<F>(S, N * N, s, c);             // P = c·h(s·S)
      gemm(false, false, N, d, N, S, v + off, 0.f, o + off);  // O = P v         (N, d)
    }
    exps += count;
  });
  return exps.load();
}

// dq, dk, dv (each may be null) from G = dL/dO; see the table at the top.
template <ScoreFn F>
void backward_kernel(const float* q, const float* k, const float* v, const float* g, float* dq,
                     float* dk, float* dv, int64_t BH, int64_t N, int64_t d, float s, float c) {
  const bool need_ds = dq || dk;
  parallel_for(BH, pair_grain(N, d), [&](int64_t p0, int64_t p1) {
    Tensor scratch_p = empty({N, N}), scratch_ds = empty({N, N});
    float *P = scratch_p.data(), *dS = scratch_ds.data();
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t off = p * N * d;
      gemm(false, true, N, N, d, q + off, k + off, 0.f, P);                // S = q kᵀ   (N, N)
      if (need_ds) gemm(false, true, N, N, d, g + off, v + off, 0.f, dS);  // dP = G vᵀ  (N, N)
      scores_backward<F>(P, dS, N * N, s, c, dv != nullptr, need_ds);      // P, dS·s
      if (dv) gemm(true, false, N, d, N, P, g + off, 0.f, dv + off);   // dv = Pᵀ G
      if (dq) gemm(false, false, N, d, N, dS, k + off, 0.f, dq + off);  // dq = dS k · s
      if (dk) gemm(true, false, N, d, N, dS, q + off, 0.f, dk + off);   // dk = dSᵀ q · s
    }
  });
}

}  // namespace

// q, k, v (B, h, N, d) -> (B, h, N, d).
Tensor relu_attention(const Tensor& q, const Tensor& k, const Tensor& v, ScoreFn fn, float alpha,
                      int64_t* exp_calls) {
  check(q.dim() == 4 && k.shape() == q.shape() && v.shape() == q.shape(),
        "relu_attention: q, k, v must be (B, h, N, d) of one shape, got ", q.shape(), ", ",
        k.shape(), ", ", v.shape());
  check(std::isfinite(alpha), "relu_attention: alpha must be finite, got ", alpha);
  const int64_t BH = q.size(0) * q.size(1), N = q.size(2), d = q.size(3);
  const float s = 1.f / std::sqrt(static_cast<float>(d));
  const float c = static_cast<float>(std::pow(static_cast<double>(N), -static_cast<double>(alpha)));

  Tensor out = empty(q.shape());
  int64_t exps = 0;
  if (N > 0 && d > 0)
    dispatch_score(fn, [&](auto tag) {
      exps = forward_kernel<decltype(tag)::value>(q.data(), k.data(), v.data(), out.data(), BH, N, d, s, c);
    });
  if (exp_calls) *exp_calls += exps;

  if (needs_grad(q, k, v))
    attach_grad_fn(out, "relu_attention", {q, k, v},
                   [qs = q.detach(), ks = k.detach(), vs = v.detach(), rq = q.requires_grad(),
                    rk = k.requires_grad(), rv = v.requires_grad(), fn, s, c](const Tensor& g) -> Grads {
      // g (B, h, N, d) -> dq, dk, dv (B, h, N, d)
      const int64_t BH = qs.size(0) * qs.size(1), N = qs.size(2), d = qs.size(3);
      Tensor dq = rq ? empty(qs.shape()) : Tensor(), dk = rk ? empty(qs.shape()) : Tensor(),
             dv = rv ? empty(qs.shape()) : Tensor();
      if (N > 0 && d > 0)
        dispatch_score(fn, [&](auto tag) {
          backward_kernel<decltype(tag)::value>(qs.data(), ks.data(), vs.data(), g.data(),
                                                rq ? dq.data() : nullptr, rk ? dk.data() : nullptr,
                                                rv ? dv.data() : nullptr, BH, N, d, s, c);
        });
      return {dq, dk, dv};
    });
  return out;
}

// ---- the module ------------------------------------------------------------------

ReluAttention::ReluAttention(const AttentionOptions& opt)
    : Attention(opt, "ReluAttention"), settings(relu_settings(opt)) {
  check(std::isfinite(settings.alpha), "ReluAttention: alpha must be a finite number, got ", settings.alpha);
  check(opt.attn_drop == 0.f, "ReluAttention: attn_drop ", opt.attn_drop,
        " is not supported (the fused core has no attention-dropout); use 0");
  if (settings.qk_norm) {
    const bool bias = settings.qk_norm_bias;
    q_norm = register_module("q_norm", std::make_shared<LayerNorm>(head_dim(), kQkNormEps, true, bias));
    k_norm = register_module("k_norm", std::make_shared<LayerNorm>(head_dim(), kQkNormEps, true, bias));
  }
  if (settings.gate) gate = register_module("gate", std::make_shared<Linear>(opt.dim, opt.dim));
}

Tensor ReluAttention::core(const Tensor& q, const Tensor& k, const Tensor& v, int64_t, int64_t) {
  Tensor qn = q_norm ? q_norm->forward(q) : q, kn = k_norm ? k_norm->forward(k) : k;
  if (qk_hook) qk_hook(qn, kn);
  return relu_attention(qn, kn, v, settings.fn, settings.alpha, &exp_calls_);
}

// o (B, N, C), the merged heads, times gate(x) (B, N, C) before proj.
Tensor ReluAttention::gate_heads(const Tensor& o, const Tensor& x) {
  return gate ? mul(o, gate->forward(x)) : o;
}

}  // namespace sima
