// SOFT: softmax-free attention with a Gaussian kernel, linear in N by Nyström
// (Lu et al., "SOFT: Softmax-free Transformer with Linear Complexity", NeurIPS 2021;
// docs/attention.md §3, §6; official code github.com/fudan-zvg/SOFT).
//
// q and k share one projection (qkv is Linear(C, 2C) -> q, v). Per (batch, head), with
// q scaled by d^-¼ as the official code does (so ‖q_i − q_j‖²/2 is ‖·‖²/(2√d) unscaled):
//
//   q̃ = m bottleneck tokens from q on its (H, W) grid, m = (H/sr)·(W/sr):
//        conv:    GELU(LayerNorm_d(Conv2d(d, d, sr, stride sr, no bias)(q)))  (one conv
//                 shared by the heads, as the official Qlandmark_op / Qnorm_act)
//        avgpool: avg_pool2d(q, sr)
//   P  = exp(−‖q̃_i − q_j‖²/2)  (m×N)      A = exp(−‖q̃_i − q̃_j‖²/2)  (m×m)
//   out = Pᵀ (A† (P v))       right to left: O(N·m·d + T·m³), linear in N
//
// A† by Newton–Raphson (newton_inverse). The kernels are fused ops (gaussian_kernel) and
// the product chain is three matmul ops. #exp = m² + m·N per head per image.
#pragma once
#include <cstdint>
#include <memory>

#include "nn/attention/attention.h"
#include "nn/conv.h"
#include "nn/norm.h"

namespace sima {

// K[..., i, j] = exp(−scale·‖a_i − b_j‖²): a (B, h, M, d), b (B, h, N, d) -> (B, h, M, N)
// (any number of leading dims, the same for both). One autograd node; a and b may be the
// same tensor. If exp_calls is given it grows by the exp() evaluations made (numel of K).
Tensor gaussian_kernel(const Tensor& a, const Tensor& b, float scale, int64_t* exp_calls = nullptr);

// Newton–Raphson (pseudo-)inverse of every m×m matrix of A (..., m, m):
//   V₀ = α·A,  α = kNewtonAlpha / ‖A‖₁²  (‖A‖₁ = max absolute column sum)
//   V_{k+1} = 2V_k − V_k A V_k,  k < iters
// One autograd node whose backward is the exact reverse of the iterations, α included.
constexpr float kNewtonAlpha = 0.9f * 2.f;  // the official inverse.py: 0.9 · 2/‖A‖₁²
Tensor newton_inverse(const Tensor& A, int64_t iters);

class SoftAttention : public Attention {
 public:
  // Uses opt.sr (>= 1), opt.bottleneck (conv | avgpool), opt.nr_iters (>= 0);
  // opt.attn_drop is unused (SOFT has no attention matrix to drop from).
  explicit SoftAttention(const AttentionOptions& opt);

  using Attention::forward;
  // x (B, N, C) with N = H·W (the token grid, required) -> (B, N, C).
  Tensor forward(const Tensor& x, int64_t H, int64_t W) override;
  // q, v (B, h, N, d) -> (B, h, N, d). SOFT shares q = k: k must be q itself or undefined.
  Tensor core(const Tensor& q, const Tensor& k, const Tensor& v, int64_t H, int64_t W) override;
  // The bottleneck tokens q̃ (B, h, m, d) of an already scaled q (B, h, N = H·W, d).
  Tensor landmarks(const Tensor& q_scaled, int64_t H, int64_t W) const;

  // conv bottleneck only: q_conv.weight (d, d, sr, sr), norm.weight, norm.bias (d).
  std::shared_ptr<Conv2d> q_conv;  // null with the avgpool bottleneck
  std::shared_ptr<LayerNorm> norm;
};

}  // namespace sima
