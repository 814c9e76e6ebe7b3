// SOFT: softmax-free attention with a Gaussian kernel, linear in N by Nyström (the variant
// "soft"; its files are named soft_gaussian, apart from softmax_attention's)
// (Lu et al., "SOFT: Softmax-free Transformer with Linear Complexity", NeurIPS 2021;
// docs/attention.md §3, §4; official code github.com/fudan-zvg/SOFT, models/softmax_free_transformer.py and
// SOFT/kernel/inverse.py; derivation in docs/derivations/soft.md).
//
// q and k share one projection (qkv is Linear(C, 2C) -> q, v). Per (batch, head), with
// q scaled by d^-¼ as the official code does (so ‖q_i − q_j‖²/2 is ‖·‖²/(2√d) unscaled):
//
//   q̃ = m bottleneck tokens from q on its (H, W) grid, m = (H/sr)·(W/sr):
//        conv:    GELU(LayerNorm_d(Conv2d(d, d, sr, stride sr, no bias)(q)))  (one conv
//                 shared by the heads, as the official Qlandmark_op / Qnorm_act)
//        avgpool: avg_pool2d(q, sr)
//   P  = exp(−‖q̃_i − q_j‖²/2)  (m×N)      A = exp(−‖q̃_i − q̃_j‖²/2)  (m×m)
//   out = Pᵀ (A⁺ (P v)) + DWConv_k(v)      right to left: O(N·m·d + T·m³), linear in N
//
// A⁺ = (A + ridge·I)⁻¹ by Newton–Raphson (newton_inverse), backward −A⁺ᵀ G A⁺ᵀ (the official
// _NewtonInverseKernel) or through the iterations (option nr_backward = unrolled).
// DWConv_k (option v_conv = k, official use_conv): a k×k conv per head, shared by the d
// channels of v (weight (h, 1, k, k), groups h, padding k/2, no bias) on v's (H, W) grid.
// The kernels are fused ops (gaussian_kernel) and the product chain is three matmul ops.
// #exp = m² + m·N per head per image.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "nn/attention/attention.h"
#include "nn/conv2d.h"
#include "nn/normalization.h"

namespace sima {

// K[..., i, j] = exp(−scale·‖a_i − b_j‖²): a (B, h, M, d), b (B, h, N, d) -> (B, h, M, N)
// (any number of leading dims, the same for both). One autograd node; a and b may be the
// same tensor. If exp_calls is given it grows by the exp() evaluations made (numel of K).
Tensor gaussian_kernel(const Tensor& a, const Tensor& b, float scale, int64_t* exp_calls = nullptr);

// Newton–Raphson (pseudo-)inverse of every m×m matrix of A (..., m, m), as the official
// newton_inv:
//   α = kNewtonAlpha / n²,  n = max_i Σ_j |A_ij|  (max row sum, computed on A itself)
//   P = A + ridge·I,  V₀ = α·P,  V_{k+1} = 2V_k − V_k P V_k,  k < iters
// so V ≈ (A + ridge·I)⁻¹. One autograd node. Backward:
//   Inverse:  dA = −Vᵀ G Vᵀ with V the output (the gradient of the true inverse, the
//             official one; exact only once the iterations have converged)
//   Unrolled: the exact reverse of the iterations, α included.
constexpr float kNewtonAlpha = 0.9f * 2.f;  // the official inverse.py: 0.9 · 2/n²
enum class NewtonBackward { Inverse, Unrolled };
NewtonBackward parse_newton_backward(const std::string& name);
Tensor newton_inverse(const Tensor& A, int64_t iters, float ridge = 0.f,
                      NewtonBackward backward = NewtonBackward::Unrolled);

// The soft row's options (variant_rows.cpp; defaults: the official fudan-zvg/SOFT code,
// docs/derivations/soft.md), read once: by the module's constructor and the row's parameter,
// grid and exp() counts.
struct SoftSettings {
  int64_t sr;                  // bottleneck kernel = stride on the (H, W) token grid
  std::string bottleneck;      // conv | avgpool
  int64_t nr_iters;            // Newton–Raphson iterations for the pseudo-inverse
  float ridge;                 // iterate on A + ridge·I (0 = none)
  int64_t v_conv;              // depthwise conv on v added to the output, odd kernel (0 = none)
  NewtonBackward nr_backward;  // inverse (−Vᵀ G Vᵀ) | unrolled (through the iterations)
};
SoftSettings soft_settings(const AttentionOptions& opt);

class SoftAttention : public Attention {
 public:
  // Uses its row's options (SoftSettings, checked again here for code that builds the class
  // directly); opt.attn_drop is unused (SOFT has no attention matrix to drop from).
  explicit SoftAttention(const AttentionOptions& opt);

  using Attention::forward;
  // x (B, N, C) with N = H·W (the token grid, required) -> (B, N, C).
  Tensor forward(const Tensor& x, int64_t H, int64_t W) override;
  // q, v (B, h, N, d) -> (B, h, N, d). SOFT shares q = k: k must be q itself or undefined.
  Tensor core(const Tensor& q, const Tensor& k, const Tensor& v, int64_t H, int64_t W) override;
  // The bottleneck tokens q̃ (B, h, m, d) of an already scaled q (B, h, N = H·W, d).
  Tensor landmarks(const Tensor& q_scaled, int64_t H, int64_t W) const;
  // DWConv_k(v) (B, h, N, d) for v (B, h, N, d) whose last H·W tokens are the grid; the
  // tokens before the grid (class token) get their v unchanged, as the official
  // ratio = 1 branch (the only one with a class token) concatenates it.
  Tensor conv_v(const Tensor& v, int64_t H, int64_t W) const;

  // conv bottleneck only: q_conv.weight (d, d, sr, sr), norm.weight, norm.bias (d).
  std::shared_ptr<Conv2d> q_conv;  // null with the avgpool bottleneck
  std::shared_ptr<LayerNorm> norm;
  std::shared_ptr<Conv2d> v_conv;  // (h, 1, k, k) depthwise over the heads; null if v_conv = 0
  const SoftSettings settings;
};

}  // namespace sima
