// Nyströmformer: softmax attention approximated in linear cost by the Nyström method
// (Xiong et al., "Nyströmformer: A Nyström-Based Algorithm for Approximating Self-Attention",
// AAAI 2021, §3 and Algorithm 1). Official code: mlpen/Nystromformer code/attention_nystrom.py
// (class NystromAttention) and, for N not divisible by m, ImageNet/T2T-ViT/models/
// token_nystromformer.py (docs/derivations/nystromformer.md lists every choice and its source).
//
// Per (batch, head), q, k, v (N, d), m landmarks, both q and k scaled by d^-¼ (so that
// q kᵀ is the softmax logits q kᵀ/√d of the unscaled ones):
//
//   q̃, k̃ = segment_means(q, m), segment_means(k, m)          (m, d)
//   F = softmax(q k̃ᵀ) (N, m),  A = softmax(q̃ k̃ᵀ) (m, m),  Bk = softmax(q̃ kᵀ) (m, N)
//   out = F · (A⁺ · (Bk · v))  [+ conv(v)]                     (N, d), O(N·m·d + m³)
//
// A⁺ by nystrom_pinv; F(·) and Bk·v are softmax_attention (one fused node each, the
// exp() calls counted there), A is softmax(matmul) (m² exp() calls, counted here).
// #exp = 2·N·m + m² per head per image. m = N is exact softmax attention, as the official
// code does when num_landmarks equals the sequence length (#exp = N²).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "nn/attention/attention.h"

namespace sima {

// Means of m consecutive segments of the N tokens: x (..., N, d) -> (..., m, d), 1 <= m <= N.
// With s = ⌊N/m⌋, the first (s+1)·m − N segments have s tokens and the others s + 1, as
// the official ImageNet code splits them (N divisible by m: m segments of N/m).
Tensor segment_means(const Tensor& x, int64_t m);

// The official iterative Moore–Penrose pseudo-inverse of every m×m matrix of A (..., m, m):
//   Z₀ = Aᵀ / n,   n = max_j Σ_i A_ij   (global: one n for all matrices; else per matrix)
//   Z_{k+1} = ¼ Z_k (13I − A Z_k (15I − A Z_k (7I − A Z_k))),   k < iters
// One autograd node; its backward is the exact reverse of these steps, n included.
// global = true is the official code's default ("original"), false its "exact" option.
Tensor nystrom_pinv(const Tensor& A, int64_t iters, bool global);

// The official conv skip: a depthwise Conv2d(h, h, (ks, 1), padding (ks/2, 0), groups h,
// no bias) over the tokens of v (B, h, N, d) read as an h-channel N×d image.
class TokenConv : public Module {
 public:
  TokenConv(int64_t heads, int64_t kernel_size);  // PyTorch's default init: U(±1/√ks)
  Tensor forward(const Tensor& v) override;       // (B, h, N, d) -> (B, h, N, d)
  int64_t kernel_size;
  Tensor weight;  // (h, 1, ks, 1)
};

// The nystromformer row's options (variant_rows.cpp), read once: by the module's constructor
// and the row's parameter and exp() counts.
struct NystromSettings {
  int64_t num_landmarks;     // m segment-mean landmarks (m = N: exact softmax)
  int64_t pinv_iters;        // iterations of the Moore–Penrose pseudo-inverse
  std::string pinv_init;     // original: one scale for the batch | exact: per matrix
  int64_t conv_kernel_size;  // depthwise conv of v over tokens (odd); 0: none
};
NystromSettings nystrom_settings(const AttentionOptions& opt);

class NystromAttention : public Attention {
 public:
  // Uses its row's options (NystromSettings, checked again here for code that builds the class
  // directly); attn_drop must be 0.
  explicit NystromAttention(const AttentionOptions& opt);
  // q, k, v (B, h, N, d) -> (B, h, N, d); N >= num_landmarks.
  Tensor core(const Tensor& q, const Tensor& k, const Tensor& v, int64_t H, int64_t W) override;

  const NystromSettings settings;
  std::shared_ptr<TokenConv> conv;  // null when conv_kernel_size = 0
};

}  // namespace sima
