// Linformer (Wang et al., "Linformer: Self-Attention with Linear Complexity", 2020; official
// code: fairseq examples/linformer, linformer_src/modules/multihead_linear_attention.py),
// SimA's Table 2 row "Linformer".
//
// Learned maps E, F (k, N) project the keys and the values along the tokens, N -> k, then
// softmax attention runs over the k projected keys. Per (batch, head):
//   K' = E k,  V' = F v                      (k, d)
//   out = softmax(q K'ᵀ · d^-½) V'           (N, d)   rows of N×k: O(N k d), linear in N
// #exp = N·k per head per image.
//
// Parameters, named as fairseq's (a PyTorch module with those names loads the state dict):
//   compress_k.weight (k, N): E        fairseq's nn.Linear(max_seq_len, k, bias=False)
//   compress_v.weight (k, N): F        absent with sharing = kv (F = E)
// sharing = none gives every head its own maps: (h, k, N) each (the paper's E_i, F_i).
// N is fixed when the module is built (AttentionOptions.num_tokens); k is proj_len, 0 for
// N/4 (fairseq's default compression ratio 4). Where E and F act (option compress):
//   kv (default): on k and v after the qkv Linear, K' = E (x W_k + b_k): the paper's E·(K W^K)
//                 and lucidrains/linformer; the fused core below does the whole attention.
//   input:        on x before the k and v parts of qkv, K' = (E x) W_k + b_k, as fairseq; then
//                 softmax_attention on the k compressed keys. The same function without a qkv
//                 bias; needs the module's own qkv (not core-only) and one E for all heads.
// A token count other than num_tokens is an error (fairseq silently uses the first N columns
// of E; docs/derivations/linformer.md).
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "core/rng.h"
#include "nn/attention/attention.h"

namespace sima {

// The fused core, one autograd node.
//   q, k, v (B, h, N, d), E, F (k, N) shared by the heads or (h, k, N) one per head
//   -> (B, h, N, d)
// E and F may be the same tensor (key-value sharing); the engine then adds their gradients.
// Attention dropout as softmax_attention: with training and attn_drop = p > 0, the N×k
// attention matrix is multiplied by a mask of 0 and 1/(1-p) drawn serially from gen.
// Adds the exp() evaluations (B·h·N·k) to *exp_calls when given.
Tensor linformer_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& E,
                           const Tensor& F, float scale, float attn_drop = 0.f, bool training = false,
                           Generator& gen = rng(RngStream::Dropout), int64_t* exp_calls = nullptr);

// The linformer row's options (variant_rows.cpp), read once: by the module's constructor and
// the row's parameter and exp() counts.
struct LinformerSettings {
  int64_t proj_len;      // k, the tokens K and V are projected to; 0: num_tokens / 4
  std::string sharing;   // headwise (one E, F for all heads) | kv (E = F as well) | none (per head)
  std::string compress;  // kv: E, F act on k, v after the qkv Linear | input: on x before it
  // k for N = num_tokens: proj_len, or N / 4 (fairseq's default --compressed 4), at least 1.
  int64_t k(int64_t num_tokens) const { return proj_len > 0 ? proj_len : std::max<int64_t>(1, num_tokens / 4); }
};
LinformerSettings linformer_settings(const AttentionOptions& opt);

// Options used: dim, num_heads, qkv_bias, attn_drop, proj_drop, num_tokens (> 0, set by the
// model) and its row's (LinformerSettings).
class LinformerAttention : public Attention {
 public:
  explicit LinformerAttention(const AttentionOptions& opt);
  using Attention::forward;
  // x (B, N, C) -> (B, N, C). compress = kv: Attention::forward (qkv, core, proj).
  Tensor forward(const Tensor& x, int64_t H, int64_t W) override;
  // q, k, v (B, h, N, d) with N = num_tokens -> (B, h, N, d).
  Tensor core(const Tensor& q, const Tensor& k, const Tensor& v, int64_t H, int64_t W) override;

  int64_t num_tokens() const { return num_tokens_; }
  int64_t proj_len() const { return proj_len_; }

  const LinformerSettings settings;
  std::shared_ptr<Module> compress_k, compress_v;  // compress_v null with sharing = kv
  Tensor E, F;  // compress_k.weight, compress_v.weight (F is E with sharing = kv)

 private:
  void check_tokens(int64_t N, const Shape& shape) const;  // N must be num_tokens
  int64_t num_tokens_, proj_len_;
};

}  // namespace sima
