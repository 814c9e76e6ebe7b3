// Nyströmformer: segment means, the iterative pseudo-inverse op, the token conv, the module.
//
// Why the core is a chain of fused parts rather than one node: its three softmax kernels
// are each the softmax attention op's forward and backward (softmax_attention.cpp) or a
// softmax of a matmul, and the only new math is the pseudo-inverse, whose backward (six
// reversed cubic steps and the scale n) would be buried in one node of the whole chain.
// So nystrom_pinv is its own node with a hand-derived backward, and the chain is
//   segment_means (narrow/reshape/mean/cat) -> softmax_attention (Bk·v) -> softmax(matmul)
//   (A) -> nystrom_pinv -> matmul -> softmax_attention (F·) [-> + TokenConv (pad, conv2d)]
// every part of which has its own gradcheck (tests/nn/test_attention_nystromformer.cpp).
#include "nn/attention/nystromformer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops/conv.h"
#include "core/ops/elementwise.h"
#include "core/ops/gemm.h"
#include "core/ops/matmul.h"
#include "core/ops/reduce.h"
#include "core/ops/shape_ops.h"
#include "core/ops/small_gemm.h"
#include "core/ops/softmax.h"
#include "core/parallel.h"
#include "nn/attention/softmax_attention.h"
#include "nn/attention/variants.h"
#include "nn/init.h"

namespace sima {

// ---- segment_means -----------------------------------------------------------------
Tensor segment_means(const Tensor& x, int64_t m) {
  check(x.defined() && x.dim() >= 2, "segment_means: x must be (..., N, d)");
  const int64_t N = x.size(-2), d = x.size(-1);
  check(m >= 1 && m <= N, "segment_means: ", m, " landmarks need 1 <= m <= N = ", N, " tokens");
  const int64_t s = N / m, n_short = (s + 1) * m - N;  // n_short segments of s, the rest of s + 1
  const int t = x.dim() - 2;                              // the token axis
  auto means = [&](int64_t start, int64_t segments, int64_t len) {
    Tensor part = narrow(x, t, start, segments * len);
    std::vector<int64_t> shape(x.shape().begin(), x.shape().begin() + t);
    for (int64_t e : {segments, len, d}) shape.push_back(e);
    return mean(reshape(part, shape), {t + 1});  // (..., segments, d)
  };
  if (n_short == m) return means(0, m, s);
  return cat({means(0, n_short, s), means(n_short * s, m - n_short, s + 1)}, t);
}

// ---- nystrom_pinv ------------------------------------------------------------------
namespace {

// Z₀ = α_p·A_pᵀ for each matrix p, α_p = 1/n with n the column sum of A at (pair[p], col[p]).
struct PinvStart {
  std::vector<float> alpha;
  std::vector<int64_t> pair, col;
};

// n = max_j Σ_i A_ij per matrix, or its maximum over all P matrices when global (the first
// matrix and column attaining it). α = 0 when n <= 0 (A = 0: Z stays 0).
PinvStart pinv_start(const float* A, int64_t P, int64_t m, bool global) {
  std::vector<float> n(P);
  PinvStart s{std::vector<float>(P), std::vector<int64_t>(P), std::vector<int64_t>(P)};
  for (int64_t p = 0; p < P; ++p) {
    std::vector<float> colsum(m, 0.f);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < m; ++j) colsum[j] += A[(p * m + i) * m + j];
    const int64_t j = std::max_element(colsum.begin(), colsum.end()) - colsum.begin();
    n[p] = colsum[j];
    s.pair[p] = p;
    s.col[p] = j;
  }
  if (global) {
    const int64_t best = std::max_element(n.begin(), n.end()) - n.begin();
    for (int64_t p = 0; p < P; ++p) n[p] = n[best], s.pair[p] = best, s.col[p] = s.col[best];
  }
  for (int64_t p = 0; p < P; ++p) s.alpha[p] = n[p] > 0.f ? 1.f / n[p] : 0.f;
  return s;
}

// One step's products from Z: P = A Z, X1 = 7I − P, X2 = 15I − P X1, X3 = 13I − P X2.
void pinv_step_terms(const float* A, const float* Z, int64_t m, float* P, float* X1, float* X2, float* X3) {
  const int64_t mm = m * m;
  small_or_library_gemm(false, false, m, m, m, A, Z, 0.f, P);
  for (int64_t i = 0; i < mm; ++i) X1[i] = -P[i];
  for (int64_t i = 0; i < m; ++i) X1[i * m + i] += 7.f;
  small_or_library_gemm(false, false, m, m, m, P, X1, 0.f, X2);
  for (int64_t i = 0; i < mm; ++i) X2[i] = -X2[i];
  for (int64_t i = 0; i < m; ++i) X2[i * m + i] += 15.f;
  small_or_library_gemm(false, false, m, m, m, P, X2, 0.f, X3);
  for (int64_t i = 0; i < mm; ++i) X3[i] = -X3[i];
  for (int64_t i = 0; i < m; ++i) X3[i * m + i] += 13.f;
}

// Runs the iterations on one matrix; Z_0..Z_iters go to hist ((iters+1)·m²). work: 4·m².
void pinv_iterate(const float* A, int64_t m, int64_t iters, float alpha, float* hist, float* work) {
  const int64_t mm = m * m;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < m; ++j) hist[i * m + j] = alpha * A[j * m + i];  // Z₀ = α Aᵀ
  float *P = work, *X1 = work + mm, *X2 = work + 2 * mm, *X3 = work + 3 * mm;
  for (int64_t k = 0; k < iters; ++k) {
    const float* Z = hist + k * mm;
    pinv_step_terms(A, Z, m, P, X1, X2, X3);
    small_or_library_gemm(false, false, m, m, m, Z, X3, 0.f, hist + (k + 1) * mm);  // Z X3
    for (int64_t i = 0; i < mm; ++i) hist[(k + 1) * mm + i] *= 0.25f;
  }
}

// The reverse of one step Z' = ¼ Z X3, G = dL/dZ' -> dL/dZ (into Gn), adds dL/dA to dA:
//   dZ = ¼ G X3ᵀ,  dX3 = ¼ Zᵀ G
//   dP = −dX3 X2ᵀ,  dX2 = −Pᵀ dX3      (X3 = 13I − P X2)
//   dP −= dX2 X1ᵀ,  dX1 = −Pᵀ dX2      (X2 = 15I − P X1)
//   dP −= dX1                          (X1 = 7I − P)
//   dA += dP Zᵀ,    dZ += Aᵀ dP        (P = A Z)
// With D1 = Zᵀ G, D2 = Pᵀ D1, D3 = Pᵀ D2: dX3 = ¼D1, dX2 = −¼D2, dX1 = ¼D3, so
//   dP = ¼ (D2 X1ᵀ − D1 X2ᵀ − D3).
// w: 8·m² floats of scratch.
void pinv_step_backward(const float* A, const float* Z, const float* G, int64_t m, float* Gn, float* dA, float* w) {
  const int64_t mm = m * m;
  float *P = w, *X1 = w + mm, *X2 = w + 2 * mm, *X3 = w + 3 * mm, *dP = w + 4 * mm, *D1 = w + 5 * mm,
        *D2 = w + 6 * mm, *D3 = w + 7 * mm;
  pinv_step_terms(A, Z, m, P, X1, X2, X3);
  small_or_library_gemm(true, false, m, m, m, Z, G, 0.f, D1);     // D1 = Zᵀ G
  small_or_library_gemm(true, false, m, m, m, P, D1, 0.f, D2);    // D2 = Pᵀ D1
  small_or_library_gemm(true, false, m, m, m, P, D2, 0.f, D3);    // D3 = Pᵀ D2
  small_or_library_gemm(false, true, m, m, m, D2, X1, 0.f, dP);   // dP = D2 X1ᵀ
  for (int64_t i = 0; i < mm; ++i) dP[i] -= D3[i];
  small_or_library_gemm(false, true, m, m, m, D1, X2, -1.f, dP);  // dP = D1 X2ᵀ − dP, negated below
  for (int64_t i = 0; i < mm; ++i) dP[i] *= -0.25f;
  small_or_library_gemm(false, true, m, m, m, dP, Z, 1.f, dA);    // dA += dP Zᵀ
  small_or_library_gemm(false, true, m, m, m, G, X3, 0.f, Gn);    // Gn = G X3ᵀ
  for (int64_t i = 0; i < mm; ++i) Gn[i] *= 0.25f;
  small_or_library_gemm(true, false, m, m, m, A, dP, 1.f, Gn);    // Gn += Aᵀ dP
}

}  // namespace

// A (.., m, m) -> Z (.., m, m), Z ≈ A⁺.
//
// Backward: the iterations run again from the saved A (hist of Z_0..Z_iters per matrix),
// then pinv_step_backward from the last step to the first. At the start Z₀ = α Aᵀ, α = 1/n:
//   dA += α G₀ᵀ,   dα = Σ G₀ ⊙ Aᵀ,   dn = −α² dα,   ∂n/∂A_ij* = 1 (column j* of matrix p*)
// With global n every matrix's dn lands on the one column that attained it.
Tensor nystrom_pinv(const Tensor& A, int64_t iters, bool global) {
  check(A.defined() && A.dim() >= 2 && A.size(-1) == A.size(-2), "nystrom_pinv: A ",
        A.defined() ? A.shape().str() : "undefined", " must be (..., m, m)");
  check(iters >= 0, "nystrom_pinv: iters = ", iters, " must be >= 0");
  const int64_t m = A.size(-1), mm = m * m, P = A.numel() / std::max<int64_t>(1, mm);
  const PinvStart start = pinv_start(A.data(), P, m, global);
  Tensor Z = empty(A.shape());
  const int64_t grain = grain_for(kGemmGrain, 3 * std::max<int64_t>(1, iters) * mm * m);
  parallel_for(P, grain, [&](int64_t p0, int64_t p1) {
    Tensor hist = empty({(iters + 1) * mm}), work = empty({4 * mm});
    for (int64_t p = p0; p < p1; ++p) {
      pinv_iterate(A.data() + p * mm, m, iters, start.alpha[p], hist.data(), work.data());
      std::memcpy(Z.data() + p * mm, hist.data() + iters * mm, sizeof(float) * mm);
    }
  });

  if (needs_grad(A))
    attach_grad_fn(Z, "nystrom_pinv", {A}, [As = A.detach(), start, iters, m, mm, P, grain](const Tensor& gZ) -> Grads {
      // gZ (.., m, m) -> dA (.., m, m)
      Tensor dA = zeros(As.shape());
      std::vector<float> dn(P, 0.f);
      parallel_for(P, grain, [&](int64_t p0, int64_t p1) {
        Tensor hist_t = empty({(iters + 1) * mm}), work_t = empty({10 * mm});
        float *hist = hist_t.data(), *G = work_t.data(), *Gn = G + mm, *w = G + 2 * mm;
        for (int64_t p = p0; p < p1; ++p) {
          const float* a = As.data() + p * mm;
          float* da = dA.data() + p * mm;
          pinv_iterate(a, m, iters, start.alpha[p], hist, w);
          std::memcpy(G, gZ.data() + p * mm, sizeof(float) * mm);
          for (int64_t k = iters - 1; k >= 0; --k) {
            pinv_step_backward(a, hist + k * mm, G, m, Gn, da, w);
            std::swap(G, Gn);
          }
          const float alpha = start.alpha[p];  // Z₀ = α Aᵀ
          float dalpha = 0.f;
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < m; ++j) {
              da[j * m + i] += alpha * G[i * m + j];
              dalpha += G[i * m + j] * a[j * m + i];
            }
          dn[p] = -alpha * alpha * dalpha;
        }
      });
      for (int64_t p = 0; p < P; ++p) {  // serial: with global n all land on one column
        if (start.alpha[p] == 0.f) continue;
        float* da = dA.data() + start.pair[p] * mm;
        for (int64_t i = 0; i < m; ++i) da[i * m + start.col[p]] += dn[p];
      }
      return {dA};
    });
  return Z;
}

// ---- TokenConv ---------------------------------------------------------------------
TokenConv::TokenConv(int64_t heads, int64_t ks) : Module("TokenConv"), kernel_size(ks) {
  check(heads >= 1 && ks >= 1 && ks % 2 == 1, "TokenConv: kernel size ", ks,
        " must be odd (padding ks/2 on both sides keeps the N tokens), heads ", heads, " >= 1");
  weight = register_parameter("weight", empty({heads, 1, ks, 1}));
  kaiming_uniform_(weight);  // fan_in = 1·ks·1: U(±1/√ks), as PyTorch's Conv2d
}

Tensor TokenConv::forward(const Tensor& v) {
  check(v.dim() == 4 && v.size(1) == weight.size(0), "TokenConv: v ", v.shape(), " must be (B, ",
        weight.size(0), ", N, d)");
  const int64_t p = kernel_size / 2;
  // (B, h, N, d) as an h-channel image of N rows and d columns, padded on the rows only
  return conv2d(pad(v, {0, 0, p, p}), weight, Tensor(), 1, 0, static_cast<int>(weight.size(0)));
}

// ---- NystromAttention --------------------------------------------------------------
NystromSettings nystrom_settings(const AttentionOptions& opt) {
  return {attention_option<int64_t>(opt, "num_landmarks"), attention_option<int64_t>(opt, "pinv_iters"),
          attention_option<std::string>(opt, "pinv_init"), attention_option<int64_t>(opt, "conv_kernel_size")};
}

NystromAttention::NystromAttention(const AttentionOptions& opt)
    : Attention(opt, "NystromAttention"), settings(nystrom_settings(opt)) {
  const std::string& name = type_name();
  const NystromSettings& s = settings;
  check(s.num_landmarks >= 1, name, ": option num_landmarks = ", s.num_landmarks, " must be >= 1");
  check(s.pinv_iters >= 0, name, ": option pinv_iters = ", s.pinv_iters, " must be >= 0 (official: 6)");
  check(s.pinv_init == "original" || s.pinv_init == "exact", name, ": option pinv_init = '", s.pinv_init,
        "' is not one of: original, exact");
  check(s.conv_kernel_size == 0 || (s.conv_kernel_size > 0 && s.conv_kernel_size % 2 == 1), name,
        ": option conv_kernel_size = ", s.conv_kernel_size, " must be 0 (no conv) or odd");
  check(opt.attn_drop == 0.f, name, ": attn_drop ", opt.attn_drop,
        " is not supported (the official code has no attention dropout); use 0");
  if (s.conv_kernel_size > 0)
    conv = register_module("conv", std::make_shared<TokenConv>(opt.num_heads, s.conv_kernel_size));
}

// q, k, v (B, h, N, d) -> (B, h, N, d)
Tensor NystromAttention::core(const Tensor& q, const Tensor& k, const Tensor& v, int64_t, int64_t) {
  const std::string& name = type_name();
  check(q.defined() && k.defined() && v.defined() && q.dim() == 4 && k.shape() == q.shape() &&
            v.shape() == q.shape(),
        name, ": q, k, v must be (B, h, N, d) of one shape");
  // m > N landmarks would be empty segments (the official segment means fail there): capped
  // at m = N, where the approximation is exact softmax attention (docs/derivations/nystromformer.md).
  const int64_t N = q.size(2), d = q.size(3), m = std::min(settings.num_landmarks, N);
  check(!conv || q.size(1) == conv->weight.size(0), name, ": q has ", q.size(1), " heads, the conv ",
        conv ? conv->weight.size(0) : 0);
  const float scale = 1.f / std::sqrt(std::sqrt(static_cast<float>(d)));  // q and k by d^-¼
  Tensor qs = mul(q, scale), ks = mul(k, scale);
  if (qk_hook) qk_hook(qs, ks);
  Generator& no_dropout = rng(RngStream::Dropout);  // attn_drop is 0: never drawn from
  Tensor x;
  if (m == N) {
    x = softmax_attention(qs, ks, v, 1.f, 0.f, false, no_dropout, &exp_calls_);
  } else {
    Tensor qt = segment_means(qs, m), kt = segment_means(ks, m);                    // (B, h, m, d)
    Tensor Bv = softmax_attention(qt, ks, v, 1.f, 0.f, false, no_dropout, &exp_calls_);  // (B, h, m, d)
    Tensor A = softmax(matmul(qt, kt, false, true), -1);                              // (B, h, m, m)
    exp_calls_ += A.numel();
    Tensor Z = nystrom_pinv(A, settings.pinv_iters, settings.pinv_init == "original");        // (B, h, m, m)
    x = softmax_attention(qs, kt, matmul(Z, Bv), 1.f, 0.f, false, no_dropout, &exp_calls_);  // (B, h, N, d)
  }
  if (conv) x = add(x, conv->forward(v));
  return x;
}

}  // namespace sima
