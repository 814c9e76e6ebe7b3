// Efficient Attention (Shen et al., "Efficient Attention: Attention with Linear
// Complexities", WACV 2021; official code github.com/cmsflash/efficient-attention,
// efficient_attention.py), SimA's Table 2 row "Efficient".
//
// Per (batch, head), q, k, v (N, d):
//   q̂ = softmax of every query over its d channels      (rows of q)
//   k̂ = softmax of every key channel over the N tokens   (columns of k)
//   out = q̂ (k̂ᵀ v)                                       (N, d); the d×d context first: O(N d²)
// No scale, as the official code. #exp = 2·N·d per head per image (every element of q and k).
//
// Deliberate differences from the official module (docs/derivations/efficient.md): q, k, v
// come from the shared qkv Linear (the official uses three 1x1 convs: the same map on every
// token), and the residual `+ input` the official module adds itself is left to the
// transformer block, which has its own.
#pragma once
#include <cstdint>

#include "nn/attention/attention.h"

namespace sima {

// The fused core, one autograd node: q, k, v (B, h, N, d) -> (B, h, N, d).
// If exp_calls is given, the forward's exp() evaluations (2·B·h·N·d) are added to it.
Tensor efficient_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t* exp_calls = nullptr);

// Options used: dim, num_heads, qkv_bias, proj_drop. attn_drop must be 0 (the official
// module has no attention dropout, and there is no attention matrix to drop from).
class EfficientAttention : public Attention {
 public:
  explicit EfficientAttention(const AttentionOptions& opt);
  Tensor core(const Tensor& q, const Tensor& k, const Tensor& v, int64_t H, int64_t W) override;
};

}  // namespace sima
