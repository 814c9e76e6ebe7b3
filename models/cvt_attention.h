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
// The core per variant (AttentionOptions.variant), the variants' own cores built
// core-only (AttentionOptions.projections = false) except for the two CvT needs to adapt:
//
//   variant     k, v stride  core
//   softmax     s_kv         CvtSoftmaxCore: softmax(q kᵀ · C^-½) v. The official scale
//                            uses the full width C, not d (a quirk kept; docs/models.md §4).
//   sima        s_kv         SimaAttention: q and k ℓ1-normalised over their own tokens.
//   xca         1            q̂ᵀ k̂ sums over the tokens: k must be on q's tokens.
//   relu        1            the fused cores take k, v of q's shape (the math would allow
//   linear_elu  1            fewer keys, the implementations do not). relu keeps its own
//   cosformer   1            d^-½ and N^-α; its gate multiplies the merged heads by gate(x).
//   soft        1            SoftAttention: k = q (SOFT's one shared projection, so there is
//                            no conv_proj_k / proj_k), v on q's tokens; the landmarks come
//                            from the HW grid tokens only, the cls token is a plain token
//                            of the Gaussian kernels.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "nn/attention/attention.h"
#include "nn/attention/soft.h"
#include "nn/conv.h"
#include "nn/layers.h"
#include "nn/linear.h"
#include "nn/norm.h"

namespace sima {

// The k, v stride the variant runs with: stride_kv for softmax and sima, 1 for the rest.
int64_t cvt_kv_stride(const std::string& variant, int64_t stride_kv);

// The official 'dw_bn' projection: conv (depthwise 3x3, pad 1, no bias) -> bn -> tokens.
class CvtConvProjection : public Module {
 public:
  CvtConvProjection(int64_t dim, int64_t stride);
  Tensor forward(const Tensor& grid) override;  // (B, C, H, W) -> (B, H'W', C)
  // The same on the tokens themselves, a channels-last grid: (B, H·W, C) -> (B, H'W', C),
  // without permuting to NCHW and back (what CvtAttention runs; forward() is its oracle).
  Tensor forward_tokens(const Tensor& tokens, int64_t H, int64_t W);
  std::shared_ptr<Conv2d> conv;
  std::shared_ptr<BatchNorm2d> bn;
};

// softmax(q kᵀ · C^-½) v with C the full width (the official CvT scale); Nq != Nk allowed.
class CvtSoftmaxCore : public Attention {
 public:
  explicit CvtSoftmaxCore(const AttentionOptions& opt);  // core only (no qkv / proj)
  Tensor core(const Tensor& q, const Tensor& k, const Tensor& v, int64_t H, int64_t W) override;
};

class CvtAttention : public Module {
 public:
  // Uses opt.variant and the variant's options, opt.dim (C), opt.num_heads, opt.qkv_bias,
  // opt.attn_drop (the core's), opt.proj_drop. with_cls_token: x carries one in front.
  CvtAttention(const AttentionOptions& opt, int64_t stride_kv, bool with_cls_token);

  // x (B, T + H·W, C) -> (B, T + H·W, C).
  Tensor forward(const Tensor& x, int64_t H, int64_t W);

  int64_t dim, num_heads, stride_kv;  // stride_kv: the one that runs (cvt_kv_stride)
  bool with_cls_token;
  std::shared_ptr<CvtConvProjection> conv_proj_q, conv_proj_k, conv_proj_v;  // no k for soft
  std::shared_ptr<Linear> proj_q, proj_k, proj_v;                            // no k for soft
  std::shared_ptr<Attention> core;  // the variant's core, child "core"
  std::shared_ptr<Linear> proj;
  std::shared_ptr<Dropout> proj_drop;

 private:
  Tensor to_heads(const Tensor& t) const;  // (B, N, C) -> (B, h, N, d)
};

}  // namespace sima
