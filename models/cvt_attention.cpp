#include "models/cvt_attention.h"

#include <cmath>

#include "core/error.h"
#include "core/ops/conv.h"
#include "core/ops/elementwise.h"
#include "core/ops/matmul.h"
#include "core/ops/shape_ops.h"
#include "core/rng.h"
#include "nn/attention/relu_attention.h"
#include "nn/attention/softmax_attention.h"

namespace sima {

int64_t cvt_kv_stride(const std::string& variant, int64_t stride_kv) {
  return variant == "softmax" || variant == "sima" ? stride_kv : 1;
}

// ---- conv projection ------------------------------------------------------------

CvtConvProjection::CvtConvProjection(int64_t dim, int64_t stride) : Module("CvtConvProjection") {
  conv = register_module("conv", std::make_shared<Conv2d>(dim, dim, 3, static_cast<int>(stride), 1,
                                                          static_cast<int>(dim), /*bias=*/false));
  bn = register_module("bn", std::make_shared<BatchNorm2d>(dim));
}

Tensor CvtConvProjection::forward(const Tensor& grid) {
  Tensor y = bn->forward(conv->forward(grid));  // (B, C, H', W')
  const int64_t B = y.size(0), C = y.size(1);
  return permute(reshape(y, {B, C, y.size(2) * y.size(3)}), {0, 2, 1});  // (B, H'W', C)
}

Tensor CvtConvProjection::forward_tokens(const Tensor& tokens, int64_t H, int64_t W) {
  const int64_t B = tokens.size(0), C = tokens.size(2);
  Tensor y = conv2d_depthwise_channels_last(reshape(tokens, {B, H, W, C}), conv->weight, conv->bias, conv->stride,
                                            conv->padding);  // (B, H', W', C)
  return reshape(bn->forward_channels_last(y), {B, y.size(1) * y.size(2), C});
}

// ---- cores ----------------------------------------------------------------------

namespace {
AttentionOptions core_only(AttentionOptions opt) {
  opt.projections = false;
  return opt;
}
}  // namespace

CvtSoftmaxCore::CvtSoftmaxCore(const AttentionOptions& opt)
    : Attention(core_only(opt), "CvtSoftmaxAttention") {}

// q (B, h, Nq, d), k, v (B, h, Nk, d) -> (B, h, Nq, d)
Tensor CvtSoftmaxCore::core(const Tensor& q, const Tensor& k, const Tensor& v, int64_t, int64_t) {
  if (qk_hook) qk_hook(q, k);
  const float scale = 1.f / std::sqrt(static_cast<float>(opt_.dim));  // C^-½, not d^-½
  return softmax_attention(q, k, v, scale, opt_.attn_drop, is_training(), rng(RngStream::Dropout),
                           &exp_calls_);
}

// ---- the attention ----------------------------------------------------------------

CvtAttention::CvtAttention(const AttentionOptions& opt, int64_t stride, bool cls)
    : Module("CvtAttention"),
      dim(opt.dim),
      num_heads(opt.num_heads),
      stride_kv(cvt_kv_stride(opt.variant, stride)),
      with_cls_token(cls) {
  check(opt.dim > 0 && opt.num_heads > 0 && opt.dim % opt.num_heads == 0, "CvtAttention: num_heads ",
        opt.num_heads, " must divide the width ", opt.dim);
  check(stride >= 1, "CvtAttention: stride_kv must be >= 1, got ", stride);
  const bool soft = opt.variant == "soft";  // q = k: no k projection
  conv_proj_q = register_module("conv_proj_q", std::make_shared<CvtConvProjection>(dim, 1));
  if (!soft) conv_proj_k = register_module("conv_proj_k", std::make_shared<CvtConvProjection>(dim, stride_kv));
  conv_proj_v = register_module("conv_proj_v", std::make_shared<CvtConvProjection>(dim, stride_kv));
  proj_q = register_module("proj_q", std::make_shared<Linear>(dim, dim, opt.qkv_bias));
  if (!soft) proj_k = register_module("proj_k", std::make_shared<Linear>(dim, dim, opt.qkv_bias));
  proj_v = register_module("proj_v", std::make_shared<Linear>(dim, dim, opt.qkv_bias));
  if (opt.variant == "softmax")
    core = std::make_shared<CvtSoftmaxCore>(opt);
  else if (soft)
    core = std::make_shared<SoftAttention>(core_only(opt));
  else
    core = make_attention(core_only(opt));  // validates the variant name and its options
  register_module("core", core);
  proj = register_module("proj", std::make_shared<Linear>(dim, dim));
  proj_drop = register_module("proj_drop", std::make_shared<Dropout>(opt.proj_drop));
}

Tensor CvtAttention::to_heads(const Tensor& t) const {
  const int64_t B = t.size(0), N = t.size(1);
  return permute(reshape(t, {B, N, num_heads, dim / num_heads}), {0, 2, 1, 3});
}

Tensor CvtAttention::forward(const Tensor& x, int64_t H, int64_t W) {
  const int64_t T = with_cls_token ? 1 : 0;
  check(x.dim() == 3 && x.size(1) == T + H * W && x.size(2) == dim, "CvtAttention: input ", x.shape(),
        " must be (B, ", T, " + ", H, "·", W, ", ", dim, ")");
  const int64_t B = x.size(0);
  Tensor cls = T ? narrow(x, 1, 0, 1) : Tensor();                             // (B, 1, C)
  Tensor tokens = T ? narrow(x, 1, 1, H * W) : x;                             // (B, HW, C)
  auto with_cls = [&](const Tensor& t) { return T ? cat({cls, t}, 1) : t; };  // (B, T + n, C)

  // conv projections on the tokens as a channels-last (B, H, W, C) grid
  auto project = [&](CvtConvProjection& conv, Linear& linear) {
    return to_heads(linear.forward(with_cls(conv.forward_tokens(tokens, H, W))));
  };
  Tensor q = project(*conv_proj_q, *proj_q);                        // (B, h, Nq, d)
  Tensor v = project(*conv_proj_v, *proj_v);                        // (B, h, Nk, d)
  Tensor k = conv_proj_k ? project(*conv_proj_k, *proj_k) : q;

  const int64_t Nq = q.size(2);
  Tensor o = reshape(permute(core->core(q, k, v, H, W), {0, 2, 1, 3}), {B, Nq, dim});  // (B, Nq, C)
  if (auto* relu = dynamic_cast<ReluAttention*>(core.get()); relu && relu->gate)
    o = mul(o, relu->gate->forward(x));  // ReLU attention's gate, on the block input
  return proj_drop->forward(proj->forward(o));
}

}  // namespace sima
