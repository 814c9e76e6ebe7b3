// CvT: Convolutional vision Transformer (Wu et al. 2021; the official microsoft/CvT
// lib/models/cls_cvt.py; docs/models.md §4), with any attention variant.
//
//   images (B, 3, 224, 224)
//   stage0  ConvEmbed 7/4/2 ->  56x56 x  64, 1 block,  1 head
//   stage1  ConvEmbed 3/2/1 ->  28x28 x 192, 2 blocks, 3 heads
//   stage2  ConvEmbed 3/2/1 ->  14x14 x 384, cls token in front, 10 blocks, 6 heads
//   norm(cls) (B, 384) -> head (B, num_classes)
//
// Per stage (the official VisionTransformer, one per stage):
//   patch_embed: proj = Conv2d(Cin, C, k, s, p, bias) -> tokens (B, HW, C) -> norm = LayerNorm(C)
//   [cat(cls_token, tokens)] -> pos_drop -> blocks (no position embedding)
//   block: x = x + drop_path(attn(norm1(x), H, W)); x = x + drop_path(mlp(norm2(x)))
//   drop path rates linspace(0, stage_drop_path[i], depth_i) within the stage
//
// Config fields read (models/config.h): in_chans, num_classes, img_size (validated only:
// nothing depends on it), stage_dims, stage_depths, stage_heads, stage_embed_kernel,
// stage_embed_stride, stage_embed_padding, stage_drop_path, stage_stride_kv, mlp_ratio,
// act (quick_gelu for CvT), qkv_bias, drop_rate (pos_drop, proj_drop, MLP), attn_drop_rate,
// norm_eps (1e-5 for CvT), attention (variant and options). drop_path_rate is not used.
// The cls token lives in the last stage only, as in every official CvT.
//
// Small images: with the 224 embedding strides 4/2/2 a 32x32 image gives 8, 4, 2 tokens per
// side. A sensible small config is stage_embed_kernel {3, 3, 3}, stage_embed_stride
// {2, 2, 2}, stage_embed_padding {1, 1, 1}: 32 -> 16 -> 8 -> 4 (see cvt_small_config).
//
// Names as the official state dict: stage0.patch_embed.proj.weight,
// stage2.cls_token, stage1.blocks.0.attn.conv_proj_q.conv.weight,
// stage1.blocks.0.attn.conv_proj_k.bn.running_mean, stage2.blocks.9.attn.proj_v.bias,
// stage2.blocks.9.mlp.fc2.weight, norm.weight, head.bias. Parameters of a variant's
// core go under attn.core (e.g. attn.core.temperature for xca).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "models/cvt_attention.h"
#include "models/model.h"
#include "nn/mlp.h"

namespace sima {

// The official ConvEmbed: proj (Conv2d with bias) then norm (LayerNorm over channels).
class CvtConvEmbed : public Module {
 public:
  CvtConvEmbed(int64_t in_chans, int64_t dim, int64_t kernel, int64_t stride, int64_t padding, float eps);
  Tensor forward(const Tensor& x) override;  // (B, Cin, H, W) -> tokens (B, H'·W', C)
  // The grid side after the embedding for an input side `size`; < 1 when too small.
  int64_t out_size(int64_t size) const;
  std::shared_ptr<Conv2d> proj;
  std::shared_ptr<LayerNorm> norm;
};

class CvtBlock : public Module {
 public:
  CvtBlock(const AttentionOptions& opt, int64_t stride_kv, bool with_cls_token, float mlp_ratio,
           const std::string& act, float drop, float drop_path, float eps);
  Tensor forward(const Tensor& x, int64_t H, int64_t W);  // (B, T + HW, C) -> same
  std::shared_ptr<LayerNorm> norm1, norm2;
  std::shared_ptr<CvtAttention> attn;
  std::shared_ptr<DropPath> drop_path;
  std::shared_ptr<Mlp> mlp;
};

class CvtStage : public Module {
 public:
  // Stage i of cfg, taking in_chans channels.
  CvtStage(const ModelConfig& cfg, size_t i, int64_t in_chans);
  // x (B, Cin, H, W) -> grid (B, C, H', W'); *cls gets the cls token (B, 1, C) after the
  // blocks if the stage has one (else it is left undefined).
  Tensor forward(const Tensor& x, Tensor* cls);
  std::shared_ptr<CvtConvEmbed> patch_embed;
  Tensor cls_token;  // (1, 1, C), last stage only
  std::shared_ptr<Dropout> pos_drop;
  std::vector<std::shared_ptr<CvtBlock>> blocks;  // children blocks.0, blocks.1, ...
};

class CvT : public Model {
 public:
  explicit CvT(const ModelConfig& cfg);  // throws sima::Error naming a bad field
  Tensor forward_features(const Tensor& images) override;  // (B, in_chans, H, W) -> (B, C_last)
  std::vector<Tensor> heads(const Tensor& features) override;  // {head(features)}; no head: {features}
  // The attention cores (CvtAttention::core) of every block, stage by stage. Their q, k
  // include the cls token in the last stage, and k has the strided H'W' tokens for softmax/sima.
  std::vector<Attention*> attention_layers() override;

  std::vector<std::shared_ptr<CvtStage>> stages;  // children stage0, stage1, ...
  std::shared_ptr<LayerNorm> norm;
  std::shared_ptr<Linear> head;  // null when num_classes == 0

 private:
  int64_t smallest_batchnorm_values(int64_t B, int64_t H, int64_t W) const;
  void check_trainable_size(const Tensor& images) const;
};

// Checks cfg's CvT fields (sima::Error naming the field and the allowed values) and returns
// the token grid side of every stage for an image side `img_size`.
std::vector<int64_t> cvt_grid_sizes(const ModelConfig& cfg, int64_t img_size);

// CvT-13 (ImageNet-1k, 224x224): dims 64/192/384, depths 1/2/10, heads 1/3/6, QuickGELU,
// LayerNorm eps 1e-5, drop path 0/0/0.1 — 19,997,480 parameters.
ModelConfig cvt13_config();
// A CvT for 32x32 images: embedding kernels 3/3/3, strides 2/2/2, paddings 1/1/1 (grids
// 16, 8, 4), the given widths, depths and heads, the rest as CvT-13.
ModelConfig cvt_small_config(std::vector<int64_t> dims = {32, 64, 96}, std::vector<int64_t> depths = {1, 1, 2},
                             std::vector<int64_t> heads = {1, 2, 3}, int64_t num_classes = 10);

}  // namespace sima
