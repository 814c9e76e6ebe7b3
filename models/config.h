// ModelConfig: everything that defines a model, for every architecture. The registry
// (registry.h) fills it from a name, a JSON object, or both; checkpoints store it as
// JSON in their metadata so a model is rebuilt from the file alone.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "nn/attention/attention.h"

namespace sima {

struct ModelConfig {
  std::string arch = "deit";  // deit | xcit | cvt
  std::string name;           // registry name it came from ("" if built from JSON only)

  // Input and output.
  int64_t img_size = 224;
  int64_t in_chans = 3;
  int64_t num_classes = 1000;
  std::vector<float> mean = {0.485f, 0.456f, 0.406f};  // input normalisation (per channel)
  std::vector<float> std = {0.229f, 0.224f, 0.225f};

  // Transformer trunk (DeiT, XCiT).
  int64_t patch_size = 16;
  int64_t embed_dim = 192;
  int64_t depth = 12;
  int64_t num_heads = 3;
  float mlp_ratio = 4.f;
  std::string act = "gelu";  // MLP activation: gelu | relu | quick_gelu
  bool qkv_bias = true;
  float drop_rate = 0.f;       // dropout after the MLP layers and on the projections
  float attn_drop_rate = 0.f;
  float drop_path_rate = 0.f;  // DeiT: linspace(0, rate, depth); XCiT: constant
  float norm_eps = 1e-6f;      // LayerNorm eps (1e-6 DeiT/XCiT, 1e-5 CvT)

  // The attention variant and its options; dim and num_heads are filled in per layer.
  AttentionOptions attention;

  // DeiT.
  bool distilled = false;               // dist_token + head_dist
  std::string patch_embed = "conv";     // conv (Conv2d k = s = patch) | conv_stem (XCiT's ConvPatchEmbed)
  float layer_scale_init = 0.f;         // 0: no LayerScale

  // XCiT.
  float eta = 1.f;             // LayerScale init of every residual branch
  bool tokens_norm = false;    // class-attention blocks: norm2 on all tokens (true) or cls only
  int64_t cls_attn_layers = 2;
  // Form of the class-attention layers: softmax | sima, or "" for automatic: sima when
  // attention.variant is sima (the SimA paper's XCiT), softmax for every other variant.
  std::string cls_attn_variant;

  // CvT: one entry per stage.
  std::vector<int64_t> stage_dims = {64, 192, 384};
  std::vector<int64_t> stage_depths = {1, 2, 10};
  std::vector<int64_t> stage_heads = {1, 3, 6};
  std::vector<int64_t> stage_embed_kernel = {7, 3, 3};
  std::vector<int64_t> stage_embed_stride = {4, 2, 2};
  std::vector<int64_t> stage_embed_padding = {2, 1, 1};
  std::vector<float> stage_drop_path = {0.f, 0.f, 0.1f};  // max rate per stage (linear within)
  // Stride of the depthwise conv projections of k and v (q: 1), the official STRIDE_KV.
  // Variants whose core needs k, v on q's tokens (xca, relu, soft, linear_elu, cosformer)
  // run with stride 1 whatever this says (models/cvt_attention.h).
  std::vector<int64_t> stage_stride_kv = {2, 2, 2};
};

}  // namespace sima
