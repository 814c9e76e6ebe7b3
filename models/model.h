// The interface every model (DeiT, XCiT, CvT) implements.
#pragma once
#include <vector>

#include "models/config.h"
#include "nn/module.h"

namespace sima {

// cfg.attention with the model-level fields filled in (they win over the same options
// inside cfg.attention): dim = embed_dim, num_heads, qkv_bias, attn_drop, proj_drop, and
// num_tokens (N of every block, for linformer's (k, N) maps).
AttentionOptions trunk_attention_options(const ModelConfig& cfg, int64_t num_tokens = 0);

class Model : public Module {
 public:
  Model(const ModelConfig& cfg, const std::string& type_name) : Module(type_name), cfg_(cfg) {}

  // images (B, in_chans, H, W) -> logits (B, num_classes). A distilled DeiT returns the
  // mean of its class and distillation heads (what inference uses).
  Tensor forward(const Tensor& images) override;
  // Every head's logits: {cls} or, for a distilled DeiT, {cls, dist} (what distillation trains).
  virtual std::vector<Tensor> forward_heads(const Tensor& images);
  // The pre-logits feature (B, D): the class token after the final norm (k-NN, DINO, probes).
  virtual Tensor forward_features(const Tensor& images) = 0;
  // The class tokens of the last `blocks` blocks that carry one, each after the final norm,
  // concatenated earliest first: (B, blocks·D). DINO's eval_linear.py features for ViT-S
  // (get_intermediate_layers, n_last_blocks = 4, no avgpool). blocks = 1 is forward_features.
  // DeiT: any 1..depth; XCiT: its class-attention blocks, 1..cls_attn_layers (the patch blocks
  // before them have no class token); CvT: 1 only. Anything else is a sima::Error naming the range.
  virtual Tensor forward_block_features(const Tensor& images, int64_t blocks);
  // Applies the classifier head(s) to forward_features' output.
  virtual std::vector<Tensor> heads(const Tensor& features) = 0;

  // The self-attention modules of the trunk, in order (heatmaps, exp counters).
  virtual std::vector<Attention*> attention_layers() = 0;

  const ModelConfig& config() const { return cfg_; }

 protected:
  ModelConfig cfg_;
};

}  // namespace sima
