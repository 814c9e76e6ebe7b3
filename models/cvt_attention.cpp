#include "models/cvt_attention.h"

#include <cmath>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops/conv.h"
#include "core/ops/elementwise.h"
#include "core/ops/matmul.h"
#include "core/ops/shape_ops.h"
#include "nn/attention/variants.h"

namespace sima {

int64_t cvt_kv_stride(const std::string& variant, int64_t stride_kv) {
  return attention_variant(variant, "CvtAttention").traits.strided_kv ? stride_kv : 1;
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

std::shared_ptr<const LowpConv2d> CvtConvProjection::folded(Precision p) const {
  const int64_t C = conv->out_channels, K = conv->weight.numel() / C;  // K: one channel's taps
  Tensor w = empty(conv->weight.shape()), b = empty({C});
  const float *pw = conv->weight.data(), *gamma = bn->weight.data(), *beta = bn->bias.data();
  const float *mean = bn->running_mean.data(), *var = bn->running_var.data();
  for (int64_t c = 0; c < C; ++c) {
    const float s = gamma[c] / std::sqrt(var[c] + bn->eps);
    for (int64_t k = 0; k < K; ++k) w.data()[c * K + k] = pw[c * K + k] * s;
    b.data()[c] = beta[c] - mean[c] * s + (conv->bias.defined() ? conv->bias.data()[c] * s : 0.f);
  }
  return std::make_shared<const LowpConv2d>(p, w, b, conv->stride, conv->padding, conv->groups);
}

Tensor CvtConvProjection::forward_tokens(const Tensor& tokens, int64_t H, int64_t W) {
  const int64_t B = tokens.size(0), C = tokens.size(2);
  if (lowp && !is_training() && !needs_grad(tokens, conv->weight, bn->weight, bn->bias)) {
    Tensor y = lowp->forward(reshape(tokens, {B, H, W, C}), ConvLayout::NHWC, ConvLayout::NHWC);  // (B, H', W', C)
    return reshape(y, {B, y.size(1) * y.size(2), C});
  }
  Tensor y = conv2d_depthwise_channels_last(reshape(tokens, {B, H, W, C}), conv->weight, conv->bias, conv->stride,
                                            conv->padding);  // (B, H', W', C)
  return reshape(bn->forward_channels_last(y), {B, y.size(1) * y.size(2), C});
}

// ---- cores ----------------------------------------------------------------------

namespace {
// The variant's core alone, with the official CvT softmax scale C^-½ (not d^-½).
AttentionOptions cvt_core_options(AttentionOptions opt) {
  opt.projections = false;
  opt.softmax_scale = 1.f / std::sqrt(static_cast<float>(opt.dim));
  return opt;
}
}  // namespace

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
  const bool shares_qk = attention_variant(opt.variant, "CvtAttention").traits.shares_qk;  // no k projection
  conv_proj_q = register_module("conv_proj_q", std::make_shared<CvtConvProjection>(dim, 1));
  if (!shares_qk) conv_proj_k = register_module("conv_proj_k", std::make_shared<CvtConvProjection>(dim, stride_kv));
  conv_proj_v = register_module("conv_proj_v", std::make_shared<CvtConvProjection>(dim, stride_kv));
  proj_q = register_module("proj_q", std::make_shared<Linear>(dim, dim, opt.qkv_bias));
  if (!shares_qk) proj_k = register_module("proj_k", std::make_shared<Linear>(dim, dim, opt.qkv_bias));
  proj_v = register_module("proj_v", std::make_shared<Linear>(dim, dim, opt.qkv_bias));
  core = register_module("core", make_attention(cvt_core_options(opt)));
  proj = register_module("proj", std::make_shared<Linear>(dim, dim));
  proj_drop = register_module("proj_drop", std::make_shared<Dropout>(opt.proj_drop));
}

Tensor CvtAttention::to_heads(const Tensor& t) const {
  const int64_t B = t.size(0), N = t.size(1);
  return permute(reshape(t, {B, N, num_heads, dim / num_heads}), {0, 2, 1, 3});
}

Tensor CvtAttention::forward(const Tensor& x, int64_t H, int64_t W) {
  return proj_drop->forward(proj->forward(heads_merged(x, H, W)));
}

Tensor CvtAttention::forward_add(const Tensor& x, const Tensor& residual, int64_t H, int64_t W) {
  if (proj_drop->p == 0.f || !proj_drop->is_training()) return proj->forward_add(heads_merged(x, H, W), residual);
  return add(residual, forward(x, H, W));
}

Tensor CvtAttention::heads_merged(const Tensor& x, int64_t H, int64_t W) {
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
  return core->gate_heads(o, x);  // the variant's gate (relu's gate option), on the block input
}

}  // namespace sima
