// SimA: softmax-free attention (docs/attention.md §3, §4; docs/attention_costs.md §2), as the official code runs it.
//
// Per (batch, head), q (N×d), k and v (N_kv×d):
//   q̂ = q / max(‖q[:, c]‖₁, eps) for every channel column c, normalised over the tokens
//   k̂ likewise
//   out = q̂ k̂ᵀ v                      no scale, no softmax, no exp
// computed as (q̂ k̂ᵀ) v (cost N²d, "qk_first") or q̂ (k̂ᵀ v) (cost Nd², "kv_first").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "nn/attention/attention.h"

namespace sima {

enum class SimaNorm { L1, L2, None };               // ‖·‖₁ (the paper), ‖·‖₂, or raw q, k
enum class SimaOrder { Auto, QkFirst, KvFirst };   // Auto: QkFirst iff N < d

// The option words, in the enums' order: {"l1", "l2", "none"} and {"auto", "qk_first",
// "kv_first"}. The variant table's norm and order keys (variant_rows.cpp) and the parsers below
// read these lists, so the words are written once.
const std::vector<std::string>& sima_norm_names();
const std::vector<std::string>& sima_order_names();
// A word of those lists -> its enum; anything else is a sima::Error naming `who`, the option
// and the allowed values.
SimaNorm parse_sima_norm(const std::string& s, const std::string& who = "SimaAttention");
SimaOrder parse_sima_order(const std::string& s, const std::string& who = "SimaAttention");
// The order that runs for N query tokens of width d: Auto becomes QkFirst iff N < d.
SimaOrder resolve_sima_order(SimaOrder order, int64_t N, int64_t d);

// The fused SimA core, one autograd node with a hand-derived backward (sima.cpp).
//   q (B, h, N, d), k and v (B, h, N_kv, d) -> (B, h, N, d)
// q and k are normalised over their own token axes (N_kv = N for self-attention).
// If q_hat / k_hat are given they receive q̂ (B, h, N, d) and k̂ (B, h, N_kv, d), detached.
Tensor sima_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                      SimaNorm norm = SimaNorm::L1, SimaOrder order = SimaOrder::Auto,
                      float eps = 1e-12f, Tensor* q_hat = nullptr, Tensor* k_hat = nullptr);

// The same core at int8, inference only (sima_int8.cpp, docs/precision.md): q̂, k̂ in float32,
// both products as dynamic int8 GEMMs. Records no graph.
Tensor sima_attention_int8(const Tensor& q, const Tensor& k, const Tensor& v, SimaNorm norm, SimaOrder order,
                           float eps);

// The core without the head copies (sima_packed.cpp): qkv (B, N, 3C), the qkv Linear's output,
// read in place as q, k, v (row stride 3C) -> (B, N, C) with the heads merged (row stride C). The
// same normalisation and products as sima_attention on the split heads, and with a gradient a
// hand-derived backward that writes dq, dk, dv in place into one (B, N, 3C) gradient.
Tensor sima_attention_packed(const Tensor& qkv, int64_t heads, SimaNorm norm, SimaOrder order, float eps);

// The same cores for inference (sima_inference.cpp): one scale per channel applied to k or to
// kᵀv instead of q̂ and k̂ written out; equal to the cores above to float rounding. No gradient:
// they record no graph and refuse inputs that need one.
Tensor sima_attention_inference(const Tensor& q, const Tensor& k, const Tensor& v, SimaNorm norm, SimaOrder order,
                                float eps);
Tensor sima_attention_packed_inference(const Tensor& qkv, int64_t heads, SimaNorm norm, SimaOrder order, float eps);

// Options used: dim, num_heads, qkv_bias, proj_drop and its row's norm, order, eps, read once by
// the constructor (attn_drop is unused, as in the official code).
class SimaAttention : public Attention {
 public:
  explicit SimaAttention(const AttentionOptions& opt);
  Tensor core(const Tensor& q, const Tensor& k, const Tensor& v, int64_t H, int64_t W) override;
  Tensor packed_core(const Tensor& qkv_out) override;  // unless a hook or the int8 core needs split heads

  SimaNorm norm() const { return norm_; }
  SimaOrder order() const { return order_; }
  float eps() const { return eps_; }
  // The product order the last core() call ran (QkFirst or KvFirst; Auto before any call).
  SimaOrder last_order() const { return last_order_; }
  // Run the core at int8 (sima_attention_int8) whenever no gradient and no qk_hook is asked
  // for; set by set_inference_precision (models/quantized.h).
  bool int8_core = false;
  // Without a gradient or a qk_hook, run the inference cores (sima_attention_*_inference) when
  // int8_core is off; set by set_inference_precision and pack_fp32_inference. Off in training
  // and in the training loop's evaluations, which keep the training core's float32 results.
  bool inference_core = false;

 private:
  SimaNorm norm_;
  SimaOrder order_;
  float eps_;
  SimaOrder last_order_ = SimaOrder::Auto;
};

}  // namespace sima
