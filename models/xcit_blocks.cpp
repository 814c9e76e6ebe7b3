#include "models/xcit_blocks.h"

#include "core/error.h"
#include "core/ops/conv.h"
#include "core/ops/elementwise.h"
#include "core/ops/shape_ops.h"

namespace sima {

namespace {

void check_block_options(const XCiTBlockOptions& opt, const char* who) {
  check(opt.dim > 0, who, ": dim must be positive, got ", opt.dim);
  check(opt.mlp_ratio > 0.f && static_cast<int64_t>(opt.dim * opt.mlp_ratio) > 0, who, ": mlp_ratio ",
        opt.mlp_ratio, " must be positive (hidden width int(dim·mlp_ratio) >= 1)");
}

std::shared_ptr<Mlp> make_mlp(const XCiTBlockOptions& opt) {
  return std::make_shared<Mlp>(opt.dim, static_cast<int64_t>(opt.dim * opt.mlp_ratio), 0, opt.act, opt.drop);
}

}  // namespace

// ---- LPI ----------------------------------------------------------------------------------

LPI::LPI(int64_t dim, const std::string& act_name) : Module("LPI") {
  const int g = static_cast<int>(dim);
  conv1 = register_module("conv1", std::make_shared<Conv2d>(dim, dim, 3, 1, 1, g));
  act = register_module("act", make_activation(act_name));
  bn = register_module("bn", std::make_shared<BatchNorm2d>(dim));
  conv2 = register_module("conv2", std::make_shared<Conv2d>(dim, dim, 3, 1, 1, g));
}

Tensor LPI::forward(const Tensor& x, int64_t H, int64_t W) {
  check(x.dim() == 3 && x.size(1) == H * W, "LPI: input ", x.shape(), " must be (B, H·W, C) for the grid ",
        H, "x", W);
  const int64_t B = x.size(0), N = x.size(1), C = x.size(2);
  // The tokens (B, N, C) are already the grid channels-last (B, H, W, C), so the two depthwise
  // convs and the BatchNorm (statistics per channel over B·H·W, as on NCHW) run without the
  // permutes to NCHW and back, with the channels as the contiguous (vectorised) loop: on
  // XCiT's 7x7 grids the NCHW kernel's rows are 7 floats long.
  Tensor y = conv2d_depthwise_channels_last(reshape(x, {B, H, W, C}), conv1->weight, conv1->bias,
                                            conv1->stride, conv1->padding);
  y = bn->forward_channels_last(act->forward(y));
  y = conv2d_depthwise_channels_last(y, conv2->weight, conv2->bias, conv2->stride, conv2->padding);
  return reshape(y, {B, N, C});  // (B, N, C)
}

// ---- XCABlock -----------------------------------------------------------------------------

XCABlock::XCABlock(const XCiTBlockOptions& opt, const AttentionOptions& attention) : Module("XCABlock") {
  check_block_options(opt, "XCABlock");
  const int64_t C = opt.dim;
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(C, opt.norm_eps));
  attn = register_module("attn", make_attention(attention));
  drop_path = register_module("drop_path", std::make_shared<DropPath>(opt.drop_path));
  norm3 = register_module("norm3", std::make_shared<LayerNorm>(C, opt.norm_eps));
  local_mp = register_module("local_mp", std::make_shared<LPI>(C, opt.act));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(C, opt.norm_eps));
  mlp = register_module("mlp", make_mlp(opt));
  gamma1 = register_parameter("gamma1", full({C}, opt.eta));
  gamma3 = register_parameter("gamma3", full({C}, opt.eta));
  gamma2 = register_parameter("gamma2", full({C}, opt.eta));
}

Tensor XCABlock::forward(const Tensor& x, int64_t H, int64_t W) {
  Tensor y = add(x, drop_path->forward(mul(attn->forward(norm1->forward(x), H, W), gamma1)));
  y = add(y, drop_path->forward(mul(local_mp->forward(norm3->forward(y), H, W), gamma3)));
  return add(y, drop_path->forward(mul(mlp->forward(norm2->forward(y)), gamma2)));
}

// ---- ClassAttentionBlock ------------------------------------------------------------------

ClassAttentionBlock::ClassAttentionBlock(const XCiTBlockOptions& opt, const ClassAttentionOptions& attention,
                                         bool tokens_norm)
    : Module("ClassAttentionBlock"), tokens_norm(tokens_norm) {
  check_block_options(opt, "ClassAttentionBlock");
  const int64_t C = opt.dim;
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(C, opt.norm_eps));
  attn = register_module("attn", std::make_shared<ClassAttention>(attention));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(C, opt.norm_eps));
  mlp = register_module("mlp", make_mlp(opt));
  gamma1 = register_parameter("gamma1", full({C}, opt.eta));
  gamma2 = register_parameter("gamma2", full({C}, opt.eta));
}

Tensor ClassAttentionBlock::forward(const Tensor& x) {
  check(x.dim() == 3 && x.size(1) >= 2, "ClassAttentionBlock: input ", x.shape(),
        " must be (B, 1+N, C) with N >= 1");
  const int64_t T = x.size(1);
  // attn returns cat(CA(u)_cls, u[:, 1:]): the patch tokens get norm1(x) added, as in timm.
  Tensor y = add(x, mul(attn->forward(norm1->forward(x)), gamma1));  // (B, T, C)
  Tensor cls, patches;                                               // (B, 1, C), (B, T-1, C)
  if (tokens_norm) {
    y = norm2->forward(y);
    cls = slice(y, 1, 0, 1);
    patches = slice(y, 1, 1, T);
  } else {
    cls = norm2->forward(slice(y, 1, 0, 1));
    patches = slice(y, 1, 1, T);
  }
  // timm: x_res = cat(cls, patches); x = x_res + cat(γ2·mlp(cls), patches), i.e. the class
  // token gets its MLP branch and the patch tokens are doubled. Written out directly:
  return cat({add(cls, mul(mlp->forward(cls), gamma2)), add(patches, patches)}, 1);
}

}  // namespace sima
