// XCA: XCiT's cross-covariance attention (docs/attention.md §3, timm's XCA).
//
// Attention runs across channels instead of tokens. Per (batch, head), with q, k, v (N×d):
//   q̂ = F.normalize(qᵀ, dim=-1)ᵀ     every channel column ℓ2-normalised over the N tokens
//   k̂ likewise
//   A = softmax(τ_h · q̂ᵀ k̂)         (d×d), softmax over the last dim; no d^-½
//   out = (dropout(A) vᵀ)ᵀ = v dropout(A)ᵀ   (N×d), back in (B, h, N, d) layout
// τ = "temperature", a parameter of shape (h, 1, 1) initialised to ones.
#pragma once
#include <cstdint>

#include "nn/attention/attention.h"

namespace sima {

// The fused XCA core, one autograd node with a hand-derived backward (xca.cpp).
//   q, k, v (B, h, N, d), temperature (h, 1, 1) -> (B, h, N, d)
// attn_drop is applied to A when training, with a mask drawn from rng(RngStream::Dropout)
// exactly as dropout() draws it. exp_calls (if given) is increased by the number of exp()
// evaluations (B·h·d²); q_hat / k_hat (if given) receive q̂, k̂ (B, h, N, d), detached.
Tensor xca_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& temperature,
                     float attn_drop = 0.f, bool training = false, int64_t* exp_calls = nullptr,
                     Tensor* q_hat = nullptr, Tensor* k_hat = nullptr);

// Options used: dim, num_heads, qkv_bias, attn_drop, proj_drop. Parameters as timm:
// temperature, qkv.weight, qkv.bias, proj.weight, proj.bias.
class XCAttention : public Attention {
 public:
  explicit XCAttention(const AttentionOptions& opt);
  Tensor core(const Tensor& q, const Tensor& k, const Tensor& v, int64_t H, int64_t W) override;
  Tensor temperature;  // (h, 1, 1)
};

}  // namespace sima
