// ReLU attention (docs/attention.md §3): softmax replaced by an elementwise
// function h of the scores and a fixed 1/N^α scale,
//
//   out = N^-α · h(q kᵀ · d^-½) v          per (batch, head), q, k, v (N, d)
//
// h ∈ relu | relu2 (relu squared) | gelu (exact, erf) | softplus (β 1, threshold 20)
//   | identity | relu6 | sigmoid.
// Options: qk_norm (LayerNorm over d on q and on k, per head, one weight (d) shared by the
// heads, eps 1e-6; parameters q_norm.{weight,bias}, k_norm.{weight,bias} as timm, or with
// qk_norm_bias = false only q_norm.weight, k_norm.weight as Flax's normalize_qk
// (LayerNorm(use_bias=False), default epsilon 1e-6), the qk-layernorm of ViT-22B that
// Wortsman et al. use), and gate (an extra Linear(C, C) named `gate`
// applied to the block input x; its output multiplies the merged heads elementwise
// before proj, no sigmoid: docs/attention.md §3).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/attention/attention.h"
#include "nn/normalization.h"

namespace sima {

enum class ScoreFn { Relu, Relu2, Gelu, Softplus, Identity, Relu6, Sigmoid };

// The fn option's words in ScoreFn's order: {"relu", "relu2", ...}. The relu row's fn key
// (variant_rows.cpp) and parse_score_fn read this list, so the words are written once.
const std::vector<std::string>& score_fn_names();
// "relu" -> ScoreFn::Relu ...; a sima::Error naming `who` and the valid names otherwise.
ScoreFn parse_score_fn(const std::string& name, const std::string& who = "ReluAttention");

// The relu row's options (variant_rows.cpp), read once: by the module's constructor and the
// row's parameter and exp() counts.
struct ReluSettings {
  ScoreFn fn;
  float alpha;        // the output is scaled by N^-alpha
  bool qk_norm;       // LayerNorm over d on q and k
  bool qk_norm_bias;  // its bias (timm) or scale only (Flax)
  bool gate;          // o ⊙ Linear(C, C)(x) before proj
};
ReluSettings relu_settings(const AttentionOptions& opt);

// The fused core, one autograd node: q, k, v (B, h, N, d) -> (B, h, N, d),
// out = N^-alpha · fn(q kᵀ / √d) v. If exp_calls is given, the exp() evaluations made
// by the forward are added to it (0 for relu, relu2, identity, relu6; one per score
// for gelu (inside erf) and sigmoid; one per score ≤ 20 for softplus).
Tensor relu_attention(const Tensor& q, const Tensor& k, const Tensor& v, ScoreFn fn,
                      float alpha = 1.f, int64_t* exp_calls = nullptr);

class ReluAttention : public Attention {
 public:
  explicit ReluAttention(const AttentionOptions& opt);
  // o ⊙ gate(x) with the gate option, else o.
  Tensor gate_heads(const Tensor& o, const Tensor& x) override;
  // q_norm/k_norm (if qk_norm), then the fused relu_attention.
  Tensor core(const Tensor& q, const Tensor& k, const Tensor& v, int64_t H, int64_t W) override;

  static constexpr float kQkNormEps = 1e-6f;
  const ReluSettings settings;
  std::shared_ptr<LayerNorm> q_norm, k_norm;     // null unless qk_norm
  std::shared_ptr<Linear> gate;                   // null unless gate
};

}  // namespace sima
