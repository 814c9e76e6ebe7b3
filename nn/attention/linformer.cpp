// Linformer attention, one fused node: forward kernel and hand-derived backward.
//
// Per (batch, head) pair p, q, k, v (N, d), E_p, F_p (k, N) (the one shared pair, or head p's),
// scale s = d^-½, M the dropout mask (0 and 1/(1-p), or 1):
//
//   forward                                 backward (G = dL/dO, (N, d))
//   K' = E_p k        (k, d)                dV' = Pdᵀ G               (k, d)
//   V' = F_p v        (k, d)                dv = F_pᵀ dV',  dF_p += dV' vᵀ   (N, d), (k, N)
//   S  = q K'ᵀ        (N, k)                dP = (G V'ᵀ) ⊙ M          (N, k)
//   P  = softmax(s·S) over the k keys       dS = s · P ⊙ (dP − rowsum(dP ⊙ P))
//   Pd = P ⊙ M        (N, k)                dq = dS K'                (N, d)
//   O  = Pd V'        (N, d)                dK' = dSᵀ q               (k, d)
//                                           dk = E_pᵀ dK',  dE_p += dK' kᵀ   (N, d), (k, N)
//
// A shared E collects dE_p from every pair, a per-head E_i from the pairs of head i: each pair
// writes its own (k, N) slice of a scratch tensor, summed serially afterwards, so the result
// does not depend on the thread count.
// Saved for backward: q, k, v, E, F (views the caller keeps alive anyway), P (B, h, N, k),
// K', V' (B, h, k, d) and the mask; P costs B·h·N·k floats, what PyTorch saves too.
#include "nn/attention/linformer.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops/gemm.h"
#include "core/ops/matmul.h"
#include "core/ops/shape_ops.h"
#include "core/ops/vmath.h"
#include "core/parallel.h"
#include "nn/attention/softmax_attention.h"
#include "nn/attention/variants.h"
#include "nn/init.h"

namespace sima {

namespace {

// The sizes of one call, and where pair p's E_p, F_p start.
struct Dims {
  int64_t B, h, N, d, kl;
  bool per_head;  // E, F (h, k, N) rather than (k, N)
  int64_t pairs() const { return B * h; }
  int64_t map_offset(int64_t p) const { return per_head ? (p % h) * kl * N : 0; }
  int64_t grain() const { return grain_for(kGemmGrain, 4 * N * kl * d); }
};

// Row softmax of s·S in place over rows of n; returns the exp() calls.
int64_t softmax_rows(float* S, int64_t rows, int64_t n, float scale) {
  for (int64_t r = 0; r < rows; ++r) {
    float* x = S + r * n;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) m = std::max(m, x[j] *= scale);
    float sum = 0.f;
    for (int64_t j = 0; j < n; ++j) sum += (x[j] = exp_fast(x[j] - m));
    const float inv = 1.f / sum;
    for (int64_t j = 0; j < n; ++j) x[j] *= inv;
  }
  return rows * n;
}

// The tensors a call reads and writes, as raw pointers (null where absent).
struct Buffers {
  const float *q, *k, *v, *E, *F, *mask;
  float *P, *Kc, *Vc, *out;
};

// Forward of every pair; returns the exp() calls.
int64_t forward_kernel(const Dims& D, const Buffers& b, float scale) {
  const int64_t N = D.N, d = D.d, kl = D.kl;
  std::atomic<int64_t> exps{0};
  parallel_for(D.pairs(), D.grain(), [&](int64_t p0, int64_t p1) {
    Tensor pd_t = b.mask ? empty({N, kl}) : Tensor();
    int64_t count = 0;
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t x = p * N * d, c = p * kl * d, a = p * N * kl;
      const float *Ep = b.E + D.map_offset(p), *Fp = b.F + D.map_offset(p);
      gemm(false, false, kl, d, N, Ep, b.k + x, 0.f, b.Kc + c);       // K' = E_p k    (k, d)
      gemm(false, false, kl, d, N, Fp, b.v + x, 0.f, b.Vc + c);       // V' = F_p v    (k, d)
      gemm(false, true, N, kl, d, b.q + x, b.Kc + c, 0.f, b.P + a);   // S = q K'ᵀ     (N, k)
      count += softmax_rows(b.P + a, N, kl, scale);                   // P
      const float* A = b.P + a;
      if (b.mask) {                                                   // Pd = P ⊙ M
        float* pd = pd_t.data();
        for (int64_t j = 0; j < N * kl; ++j) pd[j] = A[j] * b.mask[a + j];
        A = pd;
      }
      gemm(false, false, N, d, kl, A, b.Vc + c, 0.f, b.out + x);      // O = Pd V'     (N, d)
    }
    exps += count;
  });
  return exps.load();
}

// Gradients to fill (null: not wanted). dEp, dFp: (pairs, k, N) scratch, one slice per pair.
struct GradBuffers {
  float *dq, *dk, *dv, *dEp, *dFp;
};

// Backward of every pair, from g = dL/dO (B, h, N, d); see the table at the top.
void backward_kernel(const Dims& D, const Buffers& b, const float* g, const GradBuffers& r, float scale) {
  const int64_t N = D.N, d = D.d, kl = D.kl;
  parallel_for(D.pairs(), D.grain(), [&](int64_t p0, int64_t p1) {
    Tensor dP_t = empty({N, kl}), pd_t = b.mask ? empty({N, kl}) : Tensor(), dc_t = empty({kl, d});
    float *dP = dP_t.data(), *dc = dc_t.data();
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t x = p * N * d, c = p * kl * d, a = p * N * kl, e = p * kl * N;
      const float *G = g + x, *P = b.P + a, *Ep = b.E + D.map_offset(p), *Fp = b.F + D.map_offset(p);
      if (r.dv || r.dFp) {
        const float* A = P;
        if (b.mask) {
          float* pd = pd_t.data();
          for (int64_t j = 0; j < N * kl; ++j) pd[j] = P[j] * b.mask[a + j];
          A = pd;
        }
        gemm(true, false, kl, d, N, A, G, 0.f, dc);                         // dV' = Pdᵀ G   (k, d)
        if (r.dv) gemm(true, false, N, d, kl, Fp, dc, 0.f, r.dv + x);       // dv = F_pᵀ dV'
        if (r.dFp) gemm(false, true, kl, N, d, dc, b.v + x, 0.f, r.dFp + e);  // dF_p = dV' vᵀ
      }
      if (!r.dq && !r.dk && !r.dEp) continue;
      gemm(false, true, N, kl, d, G, b.Vc + c, 0.f, dP);                    // G V'ᵀ         (N, k)
      if (b.mask)
        for (int64_t j = 0; j < N * kl; ++j) dP[j] *= b.mask[a + j];        // dP
      for (int64_t i = 0; i < N; ++i) {                                     // dS, in place
        const float* pr = P + i * kl;
        float* gr = dP + i * kl;
        float dot = 0.f;
        for (int64_t j = 0; j < kl; ++j) dot += gr[j] * pr[j];
        for (int64_t j = 0; j < kl; ++j) gr[j] = scale * pr[j] * (gr[j] - dot);
      }
      if (r.dq) gemm(false, false, N, d, kl, dP, b.Kc + c, 0.f, r.dq + x);  // dq = dS K'
      if (!r.dk && !r.dEp) continue;
      gemm(true, false, kl, d, N, dP, b.q + x, 0.f, dc);                    // dK' = dSᵀ q   (k, d)
      if (r.dk) gemm(true, false, N, d, kl, Ep, dc, 0.f, r.dk + x);         // dk = E_pᵀ dK'
      if (r.dEp) gemm(false, true, kl, N, d, dc, b.k + x, 0.f, r.dEp + e);  // dE_p = dK' kᵀ
    }
  });
}

// The gradient of a map (k, N) or (h, k, N) from the per-pair slices (pairs, k, N).
Tensor sum_map_grads(const Tensor& slices, const Dims& D, const Shape& map_shape) {
  Tensor out = zeros(map_shape);
  const int64_t kn = D.kl * D.N;
  for (int64_t p = 0; p < D.pairs(); ++p) {
    float* o = out.data() + D.map_offset(p);
    const float* s = slices.data() + p * kn;
    for (int64_t j = 0; j < kn; ++j) o[j] += s[j];
  }
  return out;
}

void check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& E, const Tensor& F) {
  check(q.dim() == 4 && k.shape() == q.shape() && v.shape() == q.shape(),
        "linformer_attention: q, k, v must be (B, h, N, d) of one shape, got ", q.shape(), ", ", k.shape(),
        ", ", v.shape());
  const int64_t h = q.size(1), N = q.size(2);
  check((E.dim() == 2 || (E.dim() == 3 && E.size(0) == h)) && E.size(-1) == N && F.shape() == E.shape(),
        "linformer_attention: E ", E.shape(), " and F ", F.shape(), " must both be (k, N) or (h, k, N) with N = ",
        N, " tokens and h = ", h, " heads of q ", q.shape());
  check(E.size(-2) > 0 && N > 0 && q.size(3) > 0, "linformer_attention: k, N and d must be positive (E ",
        E.shape(), ", q ", q.shape(), ")");
}

}  // namespace

// q, k, v (B, h, N, d), E, F (k, N) or (h, k, N) -> out (B, h, N, d).
Tensor linformer_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& E, const Tensor& F,
                           float scale, float attn_drop, bool training, Generator& gen, int64_t* exp_calls) {
  check_inputs(q, k, v, E, F);
  check(scale > 0.f, "linformer_attention: scale must be positive, got ", scale);
  check(attn_drop >= 0.f && attn_drop < 1.f, "linformer_attention: attn_drop must be in [0, 1), got ", attn_drop);
  const Dims D{q.size(0), q.size(1), q.size(2), q.size(3), E.size(-2), E.dim() == 3};
  Tensor P = empty({D.B, D.h, D.N, D.kl}), Kc = empty({D.B, D.h, D.kl, D.d}), Vc = empty(Kc.shape());
  Tensor out = empty(q.shape()), mask;
  if (training && attn_drop > 0.f) {  // drawn serially: the same numbers at any thread count
    mask = empty(P.shape());
    const float keep = 1.f / (1.f - attn_drop);
    for (int64_t i = 0; i < mask.numel(); ++i) mask.data()[i] = gen.uniform() >= attn_drop ? keep : 0.f;
  }
  const Buffers b{q.data(), k.data(), v.data(), E.data(), F.data(), mask.defined() ? mask.data() : nullptr,
                  P.data(), Kc.data(), Vc.data(), out.data()};
  const int64_t exps = forward_kernel(D, b, scale);
  if (exp_calls) *exp_calls += exps;

  if (needs_grad(q, k, v) || E.requires_grad() || F.requires_grad())
    attach_grad_fn(out, "linformer_attention", {q, k, v, E, F},
                   [qs = q.detach(), ks = k.detach(), vs = v.detach(), Es = E.detach(), Fs = F.detach(), P, Kc,
                    Vc, mask, D, scale, rq = q.requires_grad(), rk = k.requires_grad(), rv = v.requires_grad(),
                    rE = E.requires_grad(), rF = F.requires_grad()](const Tensor& g) -> Grads {
      // g (B, h, N, d) -> dq, dk, dv (B, h, N, d), dE, dF (E's shape)
      Tensor dq = rq ? empty(qs.shape()) : Tensor(), dk = rk ? empty(qs.shape()) : Tensor(),
             dv = rv ? empty(qs.shape()) : Tensor();
      Tensor dEp = rE ? empty({D.pairs(), D.kl, D.N}) : Tensor(),
             dFp = rF ? empty({D.pairs(), D.kl, D.N}) : Tensor();  // per-pair slices
      const Buffers b{qs.data(), ks.data(), vs.data(), Es.data(), Fs.data(),
                      mask.defined() ? mask.data() : nullptr, P.data(), Kc.data(), Vc.data(), nullptr};
      const GradBuffers r{rq ? dq.data() : nullptr, rk ? dk.data() : nullptr, rv ? dv.data() : nullptr,
                          rE ? dEp.data() : nullptr, rF ? dFp.data() : nullptr};
      backward_kernel(D, b, g.data(), r, scale);
      return {dq, dk, dv, rE ? sum_map_grads(dEp, D, Es.shape()) : Tensor(),
              rF ? sum_map_grads(dFp, D, Fs.shape()) : Tensor()};
    });
  return out;
}

// ---- the module -------------------------------------------------------------------

namespace {

// fairseq's init of compress_k / compress_v: xavier_uniform_(gain = 1/√2) of a (k, N) weight,
// U(±gain·√(6 / (k + N))); every head's map alike when they are per head.
Tensor compress_weight(const AttentionOptions& opt, const std::string& sharing, int64_t kl) {
  Tensor w = sharing == "none" ? empty({opt.num_heads, kl, opt.num_tokens}) : empty({kl, opt.num_tokens});
  const float bound = std::sqrt(0.5f) * std::sqrt(6.f / static_cast<float>(kl + opt.num_tokens));
  uniform_(w, -bound, bound);
  return w;
}

}  // namespace

LinformerSettings linformer_settings(const AttentionOptions& opt) {
  return {attention_option<int64_t>(opt, "proj_len"), attention_option<std::string>(opt, "sharing"),
          attention_option<std::string>(opt, "compress")};
}

LinformerAttention::LinformerAttention(const AttentionOptions& opt)
    : Attention(opt, "LinformerAttention"),
      settings(linformer_settings(opt)),
      num_tokens_(opt.num_tokens),
      proj_len_(settings.k(opt.num_tokens)) {
  const LinformerSettings& s = settings;
  check(opt.num_tokens > 0, "LinformerAttention: num_tokens = ", opt.num_tokens,
        " must be the token count N of every input (> 0); the model sets it (E and F are (k, N))");
  check(s.proj_len >= 0, "LinformerAttention: proj_len = ", s.proj_len,
        " must be >= 0 (the projected length k; 0 for num_tokens / 4)");
  check(s.sharing == "headwise" || s.sharing == "kv" || s.sharing == "none", "LinformerAttention: sharing = '",
        s.sharing, "' is not one of: headwise, kv, none");
  check(s.compress == "kv" || s.compress == "input", "LinformerAttention: compress = '", s.compress,
        "' is not one of: kv, input");
  check(s.compress == "kv" || (opt.projections && s.sharing != "none"),
        "LinformerAttention: compress = input compresses x before the module's own qkv Linear: it needs "
        "projections (got ", opt.projections ? "true" : "false", ") and one map for all heads (sharing = '",
        s.sharing, "', need headwise or kv)");
  compress_k = register_module("compress_k", std::make_shared<Module>("LinformerCompress"));
  E = compress_k->register_parameter("weight", compress_weight(opt, s.sharing, proj_len_));
  if (s.sharing == "kv") {
    F = E;
  } else {
    compress_v = register_module("compress_v", std::make_shared<Module>("LinformerCompress"));
    F = compress_v->register_parameter("weight", compress_weight(opt, s.sharing, proj_len_));
  }
}

void LinformerAttention::check_tokens(int64_t N, const Shape& shape) const {
  check(N == num_tokens_, type_name(), ": built for num_tokens = ", num_tokens_, " (E, F are ", E.shape(),
        ") but got ", shape, " with N = ", N, " tokens; the token count is fixed by the model (image and patch size)");
}

Tensor LinformerAttention::core(const Tensor& q, const Tensor& k, const Tensor& v, int64_t, int64_t) {
  check(q.dim() == 4 && k.dim() == 4, type_name(), ": q ", q.shape(), " and k ", k.shape(), " must be (B, h, N, d)");
  check_tokens(q.size(2), q.shape());
  check_tokens(k.size(2), k.shape());
  if (qk_hook) qk_hook(q, k);
  const float scale = 1.f / std::sqrt(static_cast<float>(q.size(3)));
  return linformer_attention(q, k, v, E, F, scale, opt_.attn_drop, is_training(), rng(RngStream::Dropout),
                             &exp_calls_);
}

// compress = input, fairseq's order: q = x W_q + b_q, K' = (E x) W_k + b_k, V' = (F x) W_v + b_v
// (qkv.weight (3C, C) stacks W_q, W_k, W_v as fairseq's q_proj, k_proj, v_proj), then
// softmax(q K'ᵀ d^-½) V' by softmax_attention over the k compressed keys.
Tensor LinformerAttention::forward(const Tensor& x, int64_t H, int64_t W) {
  if (settings.compress == "kv") return Attention::forward(x, H, W);
  check_projections();
  check(x.dim() == 3 && x.size(2) == opt_.dim, type_name(), ": input ", x.shape(), " must be (B, N, ", opt_.dim, ")");
  check_tokens(x.size(1), x.shape());
  const int64_t B = x.size(0), C = opt_.dim, h = opt_.num_heads, d = head_dim();
  auto part = [&](const Tensor& t, int64_t i) { return t.defined() ? narrow(t, 0, i * C, C) : Tensor(); };
  auto heads = [&](const Tensor& t) { return permute(reshape(t, {B, t.size(1), h, d}), {0, 2, 1, 3}); };
  Tensor q = heads(linear(x, part(qkv->weight, 0), part(qkv->bias, 0)));              // (B, h, N, d)
  Tensor k = heads(linear(matmul(E, x), part(qkv->weight, 1), part(qkv->bias, 1)));  // (B, h, k, d)
  Tensor v = heads(linear(matmul(F, x), part(qkv->weight, 2), part(qkv->bias, 2)));  // (B, h, k, d)
  if (qk_hook) qk_hook(q, k);
  Tensor o = softmax_attention(q, k, v, 1.f / std::sqrt(static_cast<float>(d)), opt_.attn_drop, is_training(),
                               rng(RngStream::Dropout), &exp_calls_);
  return project(merge_heads(o));
}

}  // namespace sima
