#include "models/model.h"

#include "core/error.h"
#include "core/ops/elementwise.h"
#include "nn/attention/variants.h"

namespace sima {

AttentionOptions trunk_attention_options(const ModelConfig& cfg, int64_t num_tokens) {
  AttentionOptions a = cfg.attention;
  a.num_tokens = num_tokens;  // linformer
  a.dim = cfg.embed_dim;
  a.num_heads = cfg.num_heads;
  a.qkv_bias = cfg.qkv_bias;
  a.attn_drop = cfg.attn_drop_rate;
  a.proj_drop = cfg.drop_rate;
  return layer_attention_options(a);
}

Tensor Model::forward_block_features(const Tensor& images, int64_t blocks) {
  check(blocks == 1, type_name(), ": feature blocks ", blocks, " is not available: this architecture gives the ",
        "class token of its last block only (1)");
  return forward_features(images);
}

std::vector<Tensor> Model::forward_heads(const Tensor& images) { return heads(forward_features(images)); }

Tensor Model::forward(const Tensor& images) {
  std::vector<Tensor> h = forward_heads(images);
  if (h.size() == 1) return h[0];
  return mul(add(h[0], h[1]), 0.5f);  // DeiT distillation: mean of the two heads
}

}  // namespace sima
