// DeiT (Touvron et al.) / ViT as timm builds it, with any attention variant.
//
//   images (B, C, H, W) --patch_embed--> tokens (B, N, D), grid Hp × Wp
//   x = cat(cls_token, [dist_token,] tokens) + pos_embed      (B, T, D), T = N + 1 (+1)
//   x = blocks(x)        each: x += drop_path(ls1(attn(norm1 x))); x += drop_path(ls2(mlp(norm2 x)))
//   x = norm(x);  logits = head(x[:, 0])  [, head_dist(x[:, 1])]
//
// Names as timm's state dict: cls_token, dist_token, pos_embed, patch_embed.proj.*,
// blocks.<i>.{norm1, attn.{qkv, proj}, ls1.gamma, norm2, mlp.{fc1, fc2}, ls2.gamma},
// norm, head, head_dist.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "models/model.h"
#include "models/patch_embed.h"
#include "nn/attention/attention.h"
#include "nn/layers.h"
#include "nn/linear.h"
#include "nn/mlp.h"
#include "nn/normalization.h"

namespace sima {

// Pre-norm transformer block (timm Block) with optional LayerScale and drop path.
class Block : public Module {
 public:
  // drop_path: this block's rate; layer_scale_init 0 means no LayerScale.
  Block(const ModelConfig& cfg, float drop_path, float layer_scale_init);
  // x (B, T, D); (H, W): the patch grid (for attention variants that use it).
  Tensor forward(const Tensor& x, int64_t H, int64_t W);
  Tensor forward(const Tensor& x) override { return forward(x, 0, 0); }

  std::shared_ptr<LayerNorm> norm1, norm2;
  std::shared_ptr<Attention> attn;
  std::shared_ptr<Mlp> mlp;
  std::shared_ptr<Module> ls1, ls2;  // LayerScale or Identity
  std::shared_ptr<DropPath> drop_path1, drop_path2;
};

class DeiT : public Model {
 public:
  explicit DeiT(const ModelConfig& cfg);
  Tensor forward_features(const Tensor& images) override;  // (B, D): norm(x)[:, 0]
  // (B, n·D): norm(x_i)[:, 0] after each of the last n blocks, earliest first; n in 1..depth.
  Tensor forward_block_features(const Tensor& images, int64_t n) override;
  // {head(x[:, 0])} or, distilled, {head(x[:, 0]), head_dist(x[:, 1])}.
  std::vector<Tensor> forward_heads(const Tensor& images) override;
  std::vector<Tensor> heads(const Tensor& features) override;  // {head(features)}
  std::vector<Attention*> attention_layers() override;

  // Position embeddings for a Hp × Wp patch grid: the learned grid part resized
  // bicubically (align_corners=False, as timm) when it differs from the trained grid.
  Tensor position_embedding(int64_t Hp, int64_t Wp) const;

  Tensor cls_token, dist_token, pos_embed;  // (1, 1, D), (1, 1, D) or undefined, (1, T, D)
  std::shared_ptr<TokenEmbed> patch_embed;
  std::vector<std::shared_ptr<Block>> blocks;
  std::shared_ptr<LayerNorm> norm;
  std::shared_ptr<Linear> head, head_dist;  // head_dist only when distilled

 private:
  // The normalised tokens after the final norm (B, T, D); after_block(i, x) sees block i's
  // output before the norm.
  Tensor forward_tokens(const Tensor& images,
                        const std::function<void(int64_t, const Tensor&)>& after_block = nullptr);
  int64_t num_prefix_ = 1, grid_ = 0;  // class (+ distillation) tokens; trained grid side
};

// Initialise every Linear as timm does for ViT/DeiT: trunc_normal(std .02), bias 0.
void init_vit_linears(Module& m);

}  // namespace sima
