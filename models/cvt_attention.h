// CvT's convolutional attention (microsoft/CvT lib/models/cls_cvt.py, class Attention;
// docs/models.md §4), with any attention variant as its core.
//
//   x (B, T + HW, C), T = 1 with the cls token (the last stage), else 0
//     split off cls (B, 1, C); tokens (B, HW, C) -> grid (B, C, H, W)
//     q = conv_proj_q(grid)   depthwise conv3x3 stride 1 pad 1, no bias, + BatchNorm2d -> (B, HW, C)
//     k = conv_proj_k(grid)   the same with stride s_kv -> (B, H'W', C), H' = ceil(H / s_kv)
//     v = conv_proj_v(grid)   likewise
//     re-attach cls unconvolved in front of q, k, v
//     q, k, v = proj_q(q), proj_k(k), proj_v(v)     Linear(C, C, qkv_bias) each
//     heads (B, h, N, d), d = C / h  -> core -> merge (B, T + HW, C) -> proj -> proj_drop
//
// The core is the variant's own module (make_attention) built core-only
// (AttentionOptions.projections = false); what CvT does around it comes from the variant's
// traits in the table (nn/attention/variants.h), never from its name:
//
//   traits.strided_kv   k, v run with stride s_kv (softmax, sima); else stride 1: the core
//                       needs k, v on q's tokens (xca's q̂ᵀ k̂ sums over them; the fused relu,
//                       linear_elu and cosformer cores take k, v of q's shape).
//   traits.shares_qk    k = q (soft: SOFT's one shared projection), so no conv_proj_k /
//                       proj_k; soft's landmarks come from the HW grid tokens only.
//   softmax_scale       set to C^-½ for every variant: the official CvT scales by the full
//                       width C, not d (a quirk kept; docs/models.md §4); only variants that form
//                       softmax rows read it (relu keeps its own d^-½ and N^-α).
//   gate_heads          the core's gate (relu's gate option) on the merged heads and x.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "nn/attention/attention.h"
#include "nn/conv2d.h"
#include "nn/layers.h"
#include "nn/linear.h"
#include "nn/normalization.h"

namespace sima {

// The k, v stride the variant runs with: stride_kv when its traits allow strided k, v, else 1.
int64_t cvt_kv_stride(const std::string& variant, int64_t stride_kv);

// The official 'dw_bn' projection: conv (depthwise 3x3, pad 1, no bias) -> bn -> tokens.
class CvtConvProjection : public Module {
 public:
  CvtConvProjection(int64_t dim, int64_t stride);
  Tensor forward(const Tensor& grid) override;  // (B, C, H, W) -> (B, H'W', C)
  // The same on the tokens themselves, a channels-last grid: (B, H·W, C) -> (B, H'W', C),
  // without permuting to NCHW and back (what CvtAttention runs; forward() is its oracle).
  Tensor forward_tokens(const Tensor& tokens, int64_t H, int64_t W);
  // Inference (models/quantized.h): the convolution with the BatchNorm's running statistics
  // folded into its kernel and bias, w' = w·s and b' = β − μ·s with s = γ / √(σ² + ε), run by
  // oneDNN on the tokens channels last. forward_tokens uses it in eval mode when no gradient is
  // asked for; made from the weights of the moment (set it again after changing them).
  std::shared_ptr<const LowpConv2d> lowp;
  std::shared_ptr<const LowpConv2d> folded(Precision p) const;
  std::shared_ptr<Conv2d> conv;
  std::shared_ptr<BatchNorm2d> bn;
};

class CvtAttention : public Module {
 public:
  // Uses opt.variant and the variant's options, opt.dim (C), opt.num_heads, opt.qkv_bias,
  // opt.attn_drop (the core's), opt.proj_drop. with_cls_token: x carries one in front.
  CvtAttention(const AttentionOptions& opt, int64_t stride_kv, bool with_cls_token);

  // x (B, T + H·W, C) -> (B, T + H·W, C).
  Tensor forward(const Tensor& x, int64_t H, int64_t W);
  // residual + forward(x, H, W), added by proj as it stores when proj_drop is off this call
  // (Linear::forward_add); the same values.
  Tensor forward_add(const Tensor& x, const Tensor& residual, int64_t H, int64_t W);

  int64_t dim, num_heads, stride_kv;  // stride_kv: the one that runs (cvt_kv_stride)
  bool with_cls_token;
  std::shared_ptr<CvtConvProjection> conv_proj_q, conv_proj_k, conv_proj_v;  // no k when traits.shares_qk
  std::shared_ptr<Linear> proj_q, proj_k, proj_v;                            // no k when traits.shares_qk
  std::shared_ptr<Attention> core;  // the variant's core, child "core"
  std::shared_ptr<Linear> proj;
  std::shared_ptr<Dropout> proj_drop;

 private:
  Tensor heads_merged(const Tensor& x, int64_t H, int64_t W);  // o (B, T + H·W, C), before proj

 private:
  Tensor to_heads(const Tensor& t) const;  // (B, N, C) -> (B, h, N, d)
};

}  // namespace sima
