// Kernelised linear attention (docs/attention.md §3, `linear_elu` and `cosformer`):
//
//   out_i = φ(q_i)ᵀ (Σ_j φ(k_j) v_jᵀ) / (φ(q_i)ᵀ Σ_j φ(k_j) + eps)     per (batch, head)
//
// computed in cost linear in N as KV = φ(K)ᵀ V (d, d), z = φ(K)ᵀ 1 (d),
// out = (φ(Q) KV) / (φ(Q) z + eps).
//   linear_elu: φ(x) = elu(x) + 1       (Katharopoulos et al.)
//   cosformer:  φ(x) = relu(x)          (CosFormer without its cos re-weighting, SimA Table 2)
// eps = 1e-6, as in the Katharopoulos code (idiap/fast-transformers; the paper's formula has none): it keeps a
// cosformer row whose φ(q_i) is all zero at out_i = 0 instead of 0/0.
#pragma once
#include <cstdint>
#include <string>

#include "nn/attention/attention.h"

namespace sima {

enum class FeatureMap { EluPlusOne, Relu };

constexpr float kLinearAttentionEps = 1e-6f;

// The fused core, one autograd node: q, k, v (B, h, N, d) -> (B, h, N, d).
// If exp_calls is given, the exp() evaluations made by the forward are added to it:
// EluPlusOne evaluates one exp per element of q and of k (2·N·d per pair, computed
// branch-free as φ(x) = exp(min(x, 0)) + max(x, 0)); Relu none.
Tensor linear_attention(const Tensor& q, const Tensor& k, const Tensor& v, FeatureMap phi,
                        float eps = kLinearAttentionEps, int64_t* exp_calls = nullptr);

// The module around linear_attention for one feature map φ.
class LinearAttention : public Attention {
 public:
  LinearAttention(const AttentionOptions& opt, FeatureMap phi, const std::string& type_name);
  Tensor core(const Tensor& q, const Tensor& k, const Tensor& v, int64_t H, int64_t W) override;
  const FeatureMap phi;
};

// φ = elu + 1 (Katharopoulos et al.).
class LinearEluAttention : public LinearAttention {
 public:
  explicit LinearEluAttention(const AttentionOptions& opt)
      : LinearAttention(opt, FeatureMap::EluPlusOne, "LinearEluAttention") {}
};

// φ = relu (CosFormer without its re-weighting, as SimA's Table 2).
class CosformerAttention : public LinearAttention {
 public:
  explicit CosformerAttention(const AttentionOptions& opt)
      : LinearAttention(opt, FeatureMap::Relu, "CosformerAttention") {}
};

}  // namespace sima
