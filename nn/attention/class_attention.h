// Class attention (CaiT / XCiT): only the class token (token 0) queries; keys and
// values come from all N+1 tokens. timm's XCiT ClassAttention, plus SimA's softmax-free
// form (UCDvision/sima sima.py, ClassAttention; docs/attention.md §3):
//
//   softmax: attn = softmax(q_cls · kᵀ · d^-½)             (1 × (N+1)) per head
//   sima:    q̂, k̂ = ℓ1-normalised over the N+1 tokens per (b, head, channel), eps 1e-6
//            attn[j] = Σ_c q̂[cls, c] · k̂[j, c]              no softmax, no scale
//   cls = attn · v, heads concatenated -> proj -> proj_drop
//
// forward returns cat([cls_out, x[:, 1:]], dim 1), exactly as timm: the caller adds that
// to its residual, so patch tokens get x[:, 1:] added too (a quirk XCiT relies on).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/tensor.h"
#include "nn/linear.h"
#include "nn/module.h"

namespace sima {

// The fused core, everything between qkv and proj, one autograd node:
// qkv (B, T, 3C) as timm's Linear(C, 3C) lays it out, i.e. (B, T, 3, h, d) -> (B, 1, C),
// the class token's output with the heads concatenated. variant "softmax" or "sima";
// eps is the ℓ1-normalisation floor (sima only). Adds the exp() evaluations (B·h·T for
// softmax, 0 for sima) to *exp_calls, and stores the class token's attention weights
// (B, h, T) (no graph) in *attn when given.
Tensor class_attention(const Tensor& qkv, int64_t num_heads, const std::string& variant,
                       float eps = 1e-6f, int64_t* exp_calls = nullptr, Tensor* attn = nullptr);

struct ClassAttentionOptions {
  int64_t dim = 0;                  // C
  int64_t num_heads = 8;            // h (d = C / h)
  bool qkv_bias = true;             // XCiT builds its class attention with qkv_bias=True
  std::string variant = "softmax";  // softmax | sima
  float eps = 1e-6f;                // sima: ℓ1 denominator max(Σ|x|, eps)
  float proj_drop = 0.f;
};

class ClassAttention : public Module {
 public:
  explicit ClassAttention(const ClassAttentionOptions& opt);

  // x (B, T, C), T = N+1 with the class token first -> (B, T, C): row 0 the updated class
  // token, rows 1.. x[:, 1:] unchanged.
  Tensor forward(const Tensor& x) override;

  // exp() evaluations made by forward since the last reset (B·h·T per softmax forward).
  int64_t exp_calls() const { return exp_calls_; }
  void reset_exp_calls() { exp_calls_ = 0; }

  // Optional hook, called by forward with the class token's attention (B, h, T) (for
  // heatmaps: docs/training.md §6, "the class token's attention row").
  std::function<void(const Tensor& attn_cls)> attn_hook;

  const ClassAttentionOptions& options() const { return opt_; }
  int64_t head_dim() const { return opt_.dim / opt_.num_heads; }

  std::shared_ptr<Linear> qkv, proj;  // timm names: qkv = Linear(C, 3C), proj = Linear(C, C)

 private:
  ClassAttentionOptions opt_;
  int64_t exp_calls_ = 0;
};

}  // namespace sima
