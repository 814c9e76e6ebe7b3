// Kernelised linear attention (docs/attention.md rows `linear_elu` and `cosformer`):
//
//   out_i = Σ_j c_ij φ(q_i)ᵀφ(k_j) v_j / den_i,   den_i = Σ_j c_ij φ(q_i)ᵀφ(k_j) (+ eps)
//
// per (batch, head), with a re-weighting c_ij = 1 (none) or a cosine of the tokens' distance
// (cosFormer). The re-weightings used here factor as c_ij = Σ_t w_it w_jt over T terms, so
// with the widened features Q_i = [w_i1 φ(q_i), .., w_iT φ(q_i)] (T·d) and K_j likewise the
// cost stays linear in N: KV = Kᵀ V (T·d, d), z = Kᵀ 1 (T·d), out = (Q KV) / (Q z).
//   linear_elu: φ(x) = elu(x) + 1       (Katharopoulos et al.), T = 1
//   cosformer:  φ(x) = relu(x)          (Qin et al., "cosFormer", ICLR 2022), re-weighting:
//     none:  c = 1, T = 1                (SimA Table 2: cosFormer without its re-weighting)
//     cos1d: c_ij = cos(θ_i − θ_j), θ_i = π/2 · i/N over the flattened tokens i = 1..N
//            (Eq. 10; i from 1 and M = N as the official OpenNLPLab/cosFormer cosformer.py);
//            w_i = (sin θ_i, cos θ_i), T = 2
//     cos2d: c_ij = cos(α_i − α_j)·cos(β_i − β_j) on the token grid, α = π/2 · row/H,
//            β = π/2 · col/W (rows, cols from 1; SimA supplement A.4); T = 4:
//            w_i = (sα sβ, sα cβ, cα sβ, cα cβ). Tokens before the grid (class token) sit at
//            row = col = 0 (α = β = 0).
// Denominator: den + eps (eps = 1e-6, the Katharopoulos code) for linear_elu and reweight
// none; max(den, eps) for cos1d / cos2d (the official cosformer.py's clamp_min).
// Derivation: docs/derivations/cosformer.md.
#pragma once
#include <cstdint>
#include <string>

#include "nn/attention/attention.h"

namespace sima {

enum class FeatureMap { EluPlusOne, Relu };
enum class Reweight { None, Cos1d, Cos2d };

constexpr float kLinearAttentionEps = 1e-6f;

// "none" | "cos1d" | "cos2d"; a sima::Error naming the valid values otherwise.
Reweight parse_reweight(const std::string& name);

// The factors w (N, T) with c_ij = Σ_t w_it w_jt; undefined for Reweight::None. cos2d needs
// the grid H, W (H·W of the N tokens, the last ones) and says so if it is missing.
Tensor reweight_factors(Reweight r, int64_t N, int64_t H = 0, int64_t W = 0);

// The fused core, one autograd node: q, k, v (B, h, N, d) -> (B, h, N, d).
// w: the re-weighting factors (N, T) (constants, shared by batch and heads) or undefined.
// clamp_den: den = max(Q z, eps) instead of Q z + eps.
// If exp_calls is given, the exp() evaluations made by the forward are added to it:
// EluPlusOne evaluates one exp per element of q and of k (2·N·d per pair, computed
// branch-free as φ(x) = exp(min(x, 0)) + max(x, 0)); Relu none.
Tensor linear_attention(const Tensor& q, const Tensor& k, const Tensor& v, FeatureMap phi,
                        float eps = kLinearAttentionEps, int64_t* exp_calls = nullptr,
                        const Tensor& w = Tensor(), bool clamp_den = false);

// The module around linear_attention for one feature map φ.
class LinearAttention : public Attention {
 public:
  LinearAttention(const AttentionOptions& opt, FeatureMap phi, const std::string& type_name);
  // H, W: the token grid (needed by cos2d only).
  Tensor core(const Tensor& q, const Tensor& k, const Tensor& v, int64_t H, int64_t W) override;
  const FeatureMap phi;
  const Reweight reweight;
};

// φ = elu + 1 (Katharopoulos et al.); reweight must be none.
class LinearEluAttention : public LinearAttention {
 public:
  explicit LinearEluAttention(const AttentionOptions& opt)
      : LinearAttention(opt, FeatureMap::EluPlusOne, "LinearEluAttention") {}
};

// φ = relu, re-weighting by its row's reweight option (none: SimA's Table 2 row).
class CosformerAttention : public LinearAttention {
 public:
  explicit CosformerAttention(const AttentionOptions& opt)
      : LinearAttention(opt, FeatureMap::Relu, "CosformerAttention") {}
};

}  // namespace sima
