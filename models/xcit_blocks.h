// XCiT's blocks (timm xcit.py; docs/models.md §3), names as timm's state dict.
//
//   LPI                  local patch interaction: depthwise conv3x3 -> act -> BatchNorm -> depthwise conv3x3
//   XCABlock             x += γ1·attn(norm1 x);  x += γ3·LPI(norm3 x);  x += γ2·mlp(norm2 x)
//                        (each branch through drop path; the order 1, 3, 2 is the reference's)
//   ClassAttentionBlock  the class token attends to all tokens (CaiT / XCiT), no drop path
//
// γ1, γ2, γ3 are plain parameters of the block (timm's `gamma1`...), initialised to eta·ones(D).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "nn/attention/attention.h"
#include "nn/attention/class_attention.h"
#include "nn/conv2d.h"
#include "nn/layers.h"
#include "nn/mlp.h"
#include "nn/normalization.h"

namespace sima {

// timm LPI(in_features = dim): conv1, act, bn, conv2. Both convs Conv2d(dim, dim, 3, pad 1,
// groups = dim, bias), PyTorch default init; bn a BatchNorm2d(dim) (eps 1e-5).
class LPI : public Module {
 public:
  LPI(int64_t dim, const std::string& act = "gelu");
  // x (B, N, C) with N = H·W -> (B, N, C)
  Tensor forward(const Tensor& x, int64_t H, int64_t W);
  std::shared_ptr<Conv2d> conv1, conv2;
  std::shared_ptr<Module> act;
  std::shared_ptr<BatchNorm2d> bn;
};

struct XCiTBlockOptions {
  int64_t dim = 0;
  float mlp_ratio = 4.f;
  std::string act = "gelu";  // MLP and LPI activation
  float drop = 0.f;          // MLP dropout (the attention's proj_drop comes with `attention`)
  float drop_path = 0.f;
  float eta = 1.f;           // LayerScale init
  float norm_eps = 1e-6f;
};

class XCABlock : public Module {
 public:
  // attention: the options of the self-attention (any variant; dim and heads filled in).
  XCABlock(const XCiTBlockOptions& opt, const AttentionOptions& attention);
  // x (B, N, C), N = H·W patch tokens (no class token) -> (B, N, C)
  Tensor forward(const Tensor& x, int64_t H, int64_t W);

  std::shared_ptr<LayerNorm> norm1, norm3, norm2;
  std::shared_ptr<Attention> attn;
  std::shared_ptr<LPI> local_mp;
  std::shared_ptr<Mlp> mlp;
  std::shared_ptr<DropPath> drop_path;
  Tensor gamma1, gamma3, gamma2;  // (C)
};

class ClassAttentionBlock : public Module {
 public:
  // attention.variant: softmax | sima (the ClassAttention forms); tokens_norm as timm.
  ClassAttentionBlock(const XCiTBlockOptions& opt, const ClassAttentionOptions& attention, bool tokens_norm);
  // x (B, 1+N, C), class token first -> (B, 1+N, C):
  //   u = norm1(x);  x = x + γ1·cat(CA(u)_cls, u[:, 1:])       patch tokens get norm1(x) added (quirk)
  //   x = norm2(x) if tokens_norm else cat(norm2(x_cls), x[:, 1:])
  //   x = x + cat(γ2·mlp(x_cls), x[:, 1:])                       patch tokens doubled (quirk)
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<LayerNorm> norm1, norm2;
  std::shared_ptr<ClassAttention> attn;
  std::shared_ptr<Mlp> mlp;
  Tensor gamma1, gamma2;  // (C)
  bool tokens_norm;
};

}  // namespace sima
