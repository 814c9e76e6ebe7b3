// Softmax attention (MSA, ViT / DeiT): o = dropout(softmax(q kᵀ · scale)) v, per head.
//
// The whole core is one fused autograd node (softmax_attention.cpp): S = q kᵀ, the
// row softmax (over keys), the attention dropout and the product with v, forward and
// hand-derived backward side by side. #exp = h·N² per image (docs/attention.md §2).
#pragma once
#include <cstdint>

#include "core/rng.h"
#include "core/tensor.h"
#include "nn/attention/attention.h"

namespace sima {

// q (B, h, Nq, d), k (B, h, Nk, d), v (B, h, Nk, dv) -> o (B, h, Nq, dv), all contiguous.
// P = softmax(q kᵀ · scale) over the Nk keys; in training with attn_drop = p > 0, P is
// multiplied by a mask of 0 and 1/(1-p) drawn serially from `gen` (one uniform per element
// of P in (B, h, Nq, Nk) order, as F.dropout / sima::dropout draw it) before the product
// with v. Adds the number of exp() evaluations (B·h·Nq·Nk) to *exp_calls when given.
// Nq may differ from Nk (CvT's strided keys); the module uses Nq = Nk = N, scale = d^-½.
Tensor softmax_attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                         float attn_drop = 0.f, bool training = false,
                         Generator& gen = rng(RngStream::Dropout), int64_t* exp_calls = nullptr);

// Without the head copies: qkv (B, N, 3C), the qkv Linear's output, read as q, k, v (B, N, h, d)
// each in place (row stride 3C) -> o (B, N, C), heads merged, written in place (row stride C).
// The same products and softmax as softmax_attention(q, k, v, scale) on the split heads, and with
// a gradient the same backward, writing dq, dk, dv in place into one (B, N, 3C); no dropout.
Tensor softmax_attention_packed(const Tensor& qkv, int64_t heads, float scale, int64_t* exp_calls = nullptr);

// timm's Attention: qkv -> softmax_attention(q, k, v, d^-½, attn_drop) -> proj -> proj_drop.
// Options used: dim, num_heads, qkv_bias, attn_drop, proj_drop.
class SoftmaxAttention : public Attention {
 public:
  explicit SoftmaxAttention(const AttentionOptions& opt);
  Tensor core(const Tensor& q, const Tensor& k, const Tensor& v, int64_t H, int64_t W) override;
  Tensor packed_core(const Tensor& qkv_out) override;  // unless attention dropout or a hook is on
};

}  // namespace sima
