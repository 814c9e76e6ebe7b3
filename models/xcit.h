// XCiT: Cross-Covariance Image Transformer (El-Nouby et al. 2021; timm xcit.py; docs/models.md §3),
// with the self-attention of its blocks taken from ModelConfig.attention, so that the same trunk
// runs XCA (the original), SimA (the SimA paper's XCiT twins) or any other variant.
//
//   images (B, 3, H, W)
//     -> patch_embed (ConvPatchEmbed)        tokens (B, N, D) on the grid Hp × Wp
//     -> + pos_embed(Hp, Wp)                 Fourier encoding, any grid; pos_drop
//     -> blocks[depth]  (XCABlock)           attention, LPI, MLP; no class token yet
//     -> cat(cls_token, tokens)              (B, 1+N, D)
//     -> cls_attn_blocks[cls_attn_layers]    class attention (softmax or SimA form)
//     -> norm, take the class token          features (B, D)
//     -> head                                logits (B, num_classes)
//
// Reads from ModelConfig: img_size, in_chans, num_classes, patch_size (16 | 8 | 4), embed_dim,
// depth, num_heads, mlp_ratio, act, qkv_bias, drop_rate (pos_drop, projections, MLPs),
// attn_drop_rate, drop_path_rate (constant over the blocks), norm_eps, attention (variant and
// its options), eta, tokens_norm, cls_attn_layers, cls_attn_variant. The attention gets dim =
// embed_dim, num_heads, qkv_bias, attn_drop = attn_drop_rate, proj_drop = drop_rate from the
// model-level fields (they override the same fields of cfg.attention). cfg.patch_embed is not
// read: XCiT always uses ConvPatchEmbed. No dropout before the head (as the official XCiT code).
//
// Initialisation as timm: every Linear trunc_normal(std .02) with zero bias, cls_token
// trunc_normal(.02), LayerNorm 1/0, the gammas eta; Conv2d and BatchNorm keep PyTorch's defaults.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "models/model.h"
#include "models/patch_embed.h"
#include "models/pos_encoding.h"
#include "models/xcit_blocks.h"
#include "nn/linear.h"

namespace sima {

class XCiT : public Model {
 public:
  explicit XCiT(const ModelConfig& cfg);

  Tensor forward_features(const Tensor& images) override;  // (B, C, H, W) -> (B, D)
  // (B, n·D): norm(x)[:, 0] after each of the last n class-attention blocks, earliest first;
  // n in 1..cls_attn_layers (the XCA blocks before them carry no class token).
  Tensor forward_block_features(const Tensor& images, int64_t n) override;
  std::vector<Tensor> heads(const Tensor& features) override;  // {(B, num_classes)}
  std::vector<Attention*> attention_layers() override;     // blocks[i].attn, in order

  std::shared_ptr<ConvPatchEmbed> patch_embed;
  Tensor cls_token;  // (1, 1, D)
  std::shared_ptr<PositionalEncodingFourier> pos_embed;
  std::shared_ptr<Dropout> pos_drop;
  std::vector<std::shared_ptr<XCABlock>> blocks;
  std::vector<std::shared_ptr<ClassAttentionBlock>> cls_attn_blocks;
  std::shared_ptr<LayerNorm> norm;
  std::shared_ptr<Module> head;  // Linear(D, num_classes), Identity when num_classes = 0

 private:
  // norm(x)[:, 0] (B, D) after each of the last n class-attention blocks, earliest first.
  std::vector<Tensor> class_tokens(const Tensor& images, int64_t n);
};

// The timm registrations as configs (224×224, 1000 classes, attention xca):
//   xcit_nano_12_p16   D 128, depth 12, heads 4, eta 1.0,  tokens_norm false
//   xcit_nano_12_p8    D 128, depth 12, heads 4, eta 1.0,  tokens_norm false
//   xcit_tiny_12_p16   D 192, depth 12, heads 4, eta 1.0,  tokens_norm true
//   xcit_tiny_12_p8    D 192, depth 12, heads 4, eta 1.0,  tokens_norm true
//   xcit_tiny_24_p16   D 192, depth 24, heads 4, eta 1e-5, tokens_norm true
//   xcit_small_12_p16  D 384, depth 12, heads 8, eta 1.0,  tokens_norm true
//   xcit_small_24_p16  D 384, depth 24, heads 8, eta 1e-5, tokens_norm true
// An unknown name is an error listing these.
ModelConfig xcit_config(const std::string& name);

}  // namespace sima
