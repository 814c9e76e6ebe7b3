#include "models/xcit.h"

#include <cmath>

#include "core/error.h"
#include "core/ops/elementwise.h"
#include "core/ops/shape_ops.h"
#include "nn/attention/variants.h"
#include "nn/init.h"

namespace sima {

namespace {

bool is_rate(float p) { return p >= 0.f && p < 1.f; }

void check_config(const ModelConfig& c) {
  check(c.embed_dim > 0, "XCiT: embed_dim must be positive, got ", c.embed_dim);
  check(c.num_heads > 0 && c.embed_dim % c.num_heads == 0, "XCiT: num_heads ", c.num_heads,
        " must be positive and divide embed_dim ", c.embed_dim);
  check(c.patch_size == 16 || c.patch_size == 8 || c.patch_size == 4, "XCiT: patch_size ", c.patch_size,
        " is not supported (allowed: 16, 8, 4)");
  check(c.embed_dim % (c.patch_size / 2) == 0, "XCiT: embed_dim ", c.embed_dim, " must be a multiple of ",
        c.patch_size / 2, " for patch_size ", c.patch_size, " (ConvPatchEmbed's channel ladder)");
  check(c.img_size > 0 && c.img_size % c.patch_size == 0, "XCiT: img_size ", c.img_size,
        " must be a positive multiple of patch_size ", c.patch_size);
  check(c.in_chans > 0, "XCiT: in_chans must be positive, got ", c.in_chans);
  check(c.num_classes >= 0, "XCiT: num_classes must be >= 0 (0: no head), got ", c.num_classes);
  check(c.depth >= 0, "XCiT: depth must be >= 0, got ", c.depth);
  check(c.cls_attn_layers >= 1, "XCiT: cls_attn_layers must be >= 1 (the class token sees the image "
        "only through them), got ", c.cls_attn_layers);
  check(c.mlp_ratio > 0.f && static_cast<int64_t>(c.embed_dim * c.mlp_ratio) > 0, "XCiT: mlp_ratio ",
        c.mlp_ratio, " must be positive");
  check(c.act == "gelu" || c.act == "relu" || c.act == "quick_gelu", "XCiT: act '", c.act,
        "' is unknown (allowed: gelu, relu, quick_gelu)");
  check(is_rate(c.drop_rate), "XCiT: drop_rate must be in [0, 1), got ", c.drop_rate);
  check(is_rate(c.attn_drop_rate), "XCiT: attn_drop_rate must be in [0, 1), got ", c.attn_drop_rate);
  check(is_rate(c.drop_path_rate), "XCiT: drop_path_rate must be in [0, 1), got ", c.drop_path_rate);
  check(c.norm_eps > 0.f, "XCiT: norm_eps must be positive, got ", c.norm_eps);
  check(std::isfinite(c.eta), "XCiT: eta must be finite, got ", c.eta);
  check(c.attention.projections, "XCiT: attention.projections must be true (the blocks use qkv and proj)");
  check(c.cls_attn_variant.empty() || c.cls_attn_variant == "softmax" || c.cls_attn_variant == "sima",
        "XCiT: cls_attn_variant '", c.cls_attn_variant, "' is unknown (allowed: softmax, sima, or empty for "
        "automatic)");
}

// A container whose children are named "0", "1", ... (PyTorch's nn.ModuleList).
std::shared_ptr<Module> module_list() { return std::make_shared<Module>("ModuleList"); }

}  // namespace

XCiT::XCiT(const ModelConfig& cfg) : Model(cfg, "XCiT") {
  check_config(cfg);
  const int64_t D = cfg.embed_dim;

  patch_embed = register_module("patch_embed",
                                std::make_shared<ConvPatchEmbed>(cfg.patch_size, cfg.in_chans, D, cfg.act));
  cls_token = register_parameter("cls_token", zeros({1, 1, D}));
  pos_embed = register_module("pos_embed", std::make_shared<PositionalEncodingFourier>(D));
  pos_drop = register_module("pos_drop", std::make_shared<Dropout>(cfg.drop_rate));

  XCiTBlockOptions bo;
  bo.dim = D;
  bo.mlp_ratio = cfg.mlp_ratio;
  bo.act = cfg.act;
  bo.drop = cfg.drop_rate;
  bo.eta = cfg.eta;
  bo.norm_eps = cfg.norm_eps;

  const AttentionOptions ao = trunk_attention_options(cfg, (cfg.img_size / cfg.patch_size) * (cfg.img_size / cfg.patch_size));

  auto block_list = register_module("blocks", module_list());
  bo.drop_path = cfg.drop_path_rate;  // constant over the blocks (XCiT)
  for (int64_t i = 0; i < cfg.depth; ++i)
    blocks.push_back(block_list->register_module(std::to_string(i), std::make_shared<XCABlock>(bo, ao)));

  ClassAttentionOptions co;
  co.dim = D;
  co.num_heads = cfg.num_heads;
  co.qkv_bias = cfg.qkv_bias;
  // "": the form the variant's table row pairs with it (sima for sima, softmax otherwise).
  co.variant = !cfg.cls_attn_variant.empty() ? cfg.cls_attn_variant
                                             : attention_variant(cfg.attention.variant, "XCiT").traits.class_attention;
  co.eps = 1e-6f;  // the SimA class attention's ℓ1 floor
  co.proj_drop = cfg.drop_rate;
  auto cls_list = register_module("cls_attn_blocks", module_list());
  bo.drop_path = 0.f;  // no drop path in the class-attention blocks
  for (int64_t i = 0; i < cfg.cls_attn_layers; ++i)
    cls_attn_blocks.push_back(cls_list->register_module(
        std::to_string(i), std::make_shared<ClassAttentionBlock>(bo, co, cfg.tokens_norm)));

  norm = register_module("norm", std::make_shared<LayerNorm>(D, cfg.norm_eps));
  if (cfg.num_classes > 0)
    head = register_module("head", std::make_shared<Linear>(D, cfg.num_classes));
  else
    head = register_module("head", std::make_shared<Identity>());

  // timm: trunc_normal_(cls_token, .02), then every Linear trunc_normal(.02) / bias 0.
  trunc_normal_(cls_token, 0.02f);
  for (auto& [name, m] : named_modules())
    if (auto* lin = dynamic_cast<Linear*>(m)) {
      trunc_normal_(lin->weight, 0.02f);
      if (lin->bias.defined()) zeros_(lin->bias);
    }
}

std::vector<Tensor> XCiT::class_tokens(const Tensor& images, int64_t n) {
  // Training: the BatchNorms of the patch embedding and of LPI need more than one value per
  // channel; their smallest input is the B x ceil(H/p) x ceil(W/p) token grid.
  if (is_training() && images.dim() == 4) {
    const int64_t p = cfg_.patch_size, B = images.size(0);
    check(B * ((images.size(2) + p - 1) / p) * ((images.size(3) + p - 1) / p) > 1, "XCiT: images ", images.shape(),
          " are smaller than the model allows for training with batch ", B, ": a ", p, "x", p,
          "-patch grid of one token leaves its BatchNorms one value per channel; the smallest is ", p + 1, "x", p + 1,
          " (or a batch of at least 2)");
  }
  int64_t Hp = 0, Wp = 0;
  Tensor x = patch_embed->forward(images, Hp, Wp);  // (B, N, D)
  const int64_t B = x.size(0), D = x.size(2);
  x = pos_drop->forward(add(x, pos_embed->forward(Hp, Wp)));  // + (1, N, D)
  for (auto& blk : blocks) x = blk->forward(x, Hp, Wp);
  x = cat({expand(cls_token, {B, 1, D}), x}, 1);  // (B, 1+N, D)
  std::vector<Tensor> out;
  const int64_t L = int64_t(cls_attn_blocks.size());
  for (int64_t i = 0; i < L; ++i) {
    x = cls_attn_blocks[size_t(i)]->forward(x);
    // The final norm works per token: normalising the class token alone gives the same features.
    if (i >= L - n) out.push_back(squeeze(norm->forward(slice(x, 1, 0, 1)), 1));  // (B, D)
  }
  return out;
}

Tensor XCiT::forward_features(const Tensor& images) {
  std::vector<Tensor> cls = class_tokens(images, 1);
  check(cls.size() == 1, "XCiT: no class-attention block gives a class token (cls_attn_layers 0)");
  return cls[0];  // (B, D)
}

Tensor XCiT::forward_block_features(const Tensor& images, int64_t n) {
  const int64_t L = int64_t(cls_attn_blocks.size());
  check(n >= 1 && n <= L, "xcit: feature blocks ", n, " is not in 1..", L,
        " (its class-attention blocks, model.cls_attn_layers: the XCA blocks before them carry no class token)");
  std::vector<Tensor> cls = class_tokens(images, n);
  return cls.size() == 1 ? cls[0] : cat(cls, 1);
}

std::vector<Tensor> XCiT::heads(const Tensor& features) { return {head->forward(features)}; }

std::vector<Attention*> XCiT::attention_layers() {
  std::vector<Attention*> out;
  for (auto& blk : blocks) out.push_back(blk->attn.get());
  return out;
}

// ---- presets ------------------------------------------------------------------------------

ModelConfig xcit_config(const std::string& name) {
  struct Preset {
    const char* name;
    int64_t patch, dim, depth, heads;
    float eta;
    bool tokens_norm;
  };
  // timm's register_model entries (xcit.py).
  static const Preset presets[] = {
      {"xcit_nano_12_p16", 16, 128, 12, 4, 1.f, false},  {"xcit_nano_12_p8", 8, 128, 12, 4, 1.f, false},
      {"xcit_tiny_12_p16", 16, 192, 12, 4, 1.f, true},   {"xcit_tiny_12_p8", 8, 192, 12, 4, 1.f, true},
      {"xcit_tiny_24_p16", 16, 192, 24, 4, 1e-5f, true}, {"xcit_small_12_p16", 16, 384, 12, 8, 1.f, true},
      {"xcit_small_24_p16", 16, 384, 24, 8, 1e-5f, true},
  };
  std::string allowed;
  for (const Preset& p : presets) {
    if (name == p.name) {
      ModelConfig c;
      c.arch = "xcit";
      c.name = name;
      c.patch_embed = "conv_stem";
      c.patch_size = p.patch;
      c.embed_dim = p.dim;
      c.depth = p.depth;
      c.num_heads = p.heads;
      c.eta = p.eta;
      c.tokens_norm = p.tokens_norm;
      c.cls_attn_layers = 2;
      c.attention.variant = "xca";
      return c;
    }
    allowed += (allowed.empty() ? "" : ", ") + std::string(p.name);
  }
  fail("XCiT: model name '", name, "' is unknown (allowed: ", allowed, ")");
}

}  // namespace sima
