#include "models/deit.h"

#include "core/error.h"
#include "core/ops.h"
#include "models/patch_embed.h"
#include "nn/init.h"

namespace sima {

void init_vit_linears(Module& m) {
  for (auto& [name, mod] : m.named_modules())
    if (auto* lin = dynamic_cast<Linear*>(mod)) {
      trunc_normal_(lin->weight, 0.02f);
      if (lin->bias.defined()) zeros_(lin->bias);
    }
}

// ---- Block --------------------------------------------------------------------
Block::Block(const ModelConfig& cfg, float drop_path, float layer_scale_init) : Module("Block") {
  const int64_t D = cfg.embed_dim;
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(D, cfg.norm_eps));
  const int64_t N = (cfg.img_size / cfg.patch_size) * (cfg.img_size / cfg.patch_size) + (cfg.distilled ? 2 : 1);
  attn = register_module("attn", make_attention(trunk_attention_options(cfg, N)));
  if (layer_scale_init > 0.f) ls1 = register_module("ls1", std::make_shared<LayerScale>(D, layer_scale_init));
  else ls1 = std::make_shared<Identity>();
  drop_path1 = register_module("drop_path1", std::make_shared<DropPath>(drop_path));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(D, cfg.norm_eps));
  mlp = register_module("mlp", std::make_shared<Mlp>(D, static_cast<int64_t>(D * cfg.mlp_ratio), D, cfg.act,
                                                     cfg.drop_rate));
  if (layer_scale_init > 0.f) ls2 = register_module("ls2", std::make_shared<LayerScale>(D, layer_scale_init));
  else ls2 = std::make_shared<Identity>();
  drop_path2 = register_module("drop_path2", std::make_shared<DropPath>(drop_path));
}

Tensor Block::forward(const Tensor& x, int64_t H, int64_t W) {
  // With no LayerScale and no drop path this call, each branch's last Linear may add the residual
  // as it stores (forward_add: reduced-precision or packed inference); the same values.
  auto off = [&](const DropPath& d) { return d.p == 0.f || !d.is_training(); };
  if (dynamic_cast<Identity*>(ls1.get()) && dynamic_cast<Identity*>(ls2.get()) && off(*drop_path1) && off(*drop_path2)) {
    Tensor y = attn->forward_add(norm1->forward(x), x, H, W);
    return mlp->forward_add(norm2->forward(y), y);
  }
  Tensor y = add(x, drop_path1->forward(ls1->forward(attn->forward(norm1->forward(x), H, W))));
  return add(y, drop_path2->forward(ls2->forward(mlp->forward(norm2->forward(y)))));
}

// ---- DeiT ---------------------------------------------------------------------
DeiT::DeiT(const ModelConfig& cfg) : Model(cfg, "DeiT") {
  const int64_t D = cfg.embed_dim;
  check(cfg.img_size > 0 && cfg.patch_size > 0 && cfg.img_size % cfg.patch_size == 0, "deit: img_size ",
        cfg.img_size, " must be a positive multiple of patch_size ", cfg.patch_size);
  check(cfg.depth > 0 && D > 0 && cfg.num_classes > 0 && cfg.in_chans > 0,
        "deit: depth, embed_dim, num_classes and in_chans must be positive");
  check(cfg.drop_path_rate >= 0.f && cfg.drop_path_rate < 1.f, "deit: drop_path_rate ", cfg.drop_path_rate,
        " must be in [0, 1)");
  grid_ = cfg.img_size / cfg.patch_size;
  num_prefix_ = cfg.distilled ? 2 : 1;

  cls_token = register_parameter("cls_token", zeros({1, 1, D}));
  if (cfg.distilled) dist_token = register_parameter("dist_token", zeros({1, 1, D}));
  pos_embed = register_parameter("pos_embed", zeros({1, grid_ * grid_ + num_prefix_, D}));
  patch_embed = register_module("patch_embed", make_patch_embed(cfg.patch_embed, cfg.patch_size, cfg.in_chans, D));

  auto seq = std::make_shared<Sequential>();
  for (int64_t i = 0; i < cfg.depth; ++i) {
    // Stochastic depth grows linearly: linspace(0, rate, depth).
    float dp = cfg.depth > 1 ? cfg.drop_path_rate * static_cast<float>(i) / static_cast<float>(cfg.depth - 1) : 0.f;
    blocks.push_back(std::make_shared<Block>(cfg, dp, cfg.layer_scale_init));
    seq->push_back(blocks.back());
  }
  register_module("blocks", seq);
  norm = register_module("norm", std::make_shared<LayerNorm>(D, cfg.norm_eps));
  head = register_module("head", std::make_shared<Linear>(D, cfg.num_classes));
  if (cfg.distilled) head_dist = register_module("head_dist", std::make_shared<Linear>(D, cfg.num_classes));

  // timm / DeiT init: tokens and position embedding trunc_normal(.02), Linear trunc_normal(.02)
  // with zero bias, LayerNorm ones/zeros, the patch conv keeps PyTorch's default.
  trunc_normal_(pos_embed, 0.02f);
  trunc_normal_(cls_token, 0.02f);
  if (cfg.distilled) trunc_normal_(dist_token, 0.02f);
  init_vit_linears(*this);
}

Tensor DeiT::position_embedding(int64_t Hp, int64_t Wp) const {
  if (Hp == grid_ && Wp == grid_) return pos_embed;
  const int64_t D = cfg_.embed_dim;
  Tensor prefix = narrow(pos_embed, 1, 0, num_prefix_);                      // (1, P, D)
  Tensor grid = narrow(pos_embed, 1, num_prefix_, grid_ * grid_);           // (1, g², D)
  grid = permute(reshape(grid, {1, grid_, grid_, D}), {0, 3, 1, 2});         // (1, D, g, g)
  grid = interpolate(grid, Hp, Wp, InterpMode::Bicubic, false);              // (1, D, Hp, Wp)
  grid = reshape(permute(grid, {0, 2, 3, 1}), {1, Hp * Wp, D});
  return cat({prefix, grid}, 1);
}

Tensor DeiT::forward_tokens(const Tensor& images, const std::function<void(int64_t, const Tensor&)>& after_block) {
  check(images.dim() == 4 && images.size(1) == cfg_.in_chans, "deit: input ", images.shape(),
        " must be (B, ", cfg_.in_chans, ", H, W)");
  int64_t Hp = 0, Wp = 0;
  Tensor x = patch_embed->forward(images, Hp, Wp);  // (B, N, D)
  const int64_t B = x.size(0), D = cfg_.embed_dim;
  std::vector<Tensor> parts{expand(cls_token, {B, 1, D})};
  if (dist_token.defined()) parts.push_back(expand(dist_token, {B, 1, D}));
  parts.push_back(x);
  x = add(cat(parts, 1), position_embedding(Hp, Wp));  // (B, T, D)
  for (size_t i = 0; i < blocks.size(); ++i) {
    x = blocks[i]->forward(x, Hp, Wp);
    if (after_block) after_block(int64_t(i), x);
  }
  return norm->forward(x);
}

Tensor DeiT::forward_features(const Tensor& images) {
  Tensor x = forward_tokens(images);
  return squeeze(narrow(x, 1, 0, 1), 1);  // (B, D)
}

Tensor DeiT::forward_block_features(const Tensor& images, int64_t n) {
  const int64_t depth = int64_t(blocks.size());
  check(n >= 1 && n <= depth, "deit: feature blocks ", n, " is not in 1..", depth, " (the model's depth)");
  std::vector<Tensor> cls;
  forward_tokens(images, [&](int64_t i, const Tensor& x) {
    // The final norm works per token: normalising the class token alone gives the same.
    if (i >= depth - n) cls.push_back(squeeze(norm->forward(narrow(x, 1, 0, 1)), 1));  // (B, D)
  });
  return cls.size() == 1 ? cls[0] : cat(cls, 1);
}

std::vector<Tensor> DeiT::forward_heads(const Tensor& images) {
  Tensor x = forward_tokens(images);
  std::vector<Tensor> out{head->forward(squeeze(narrow(x, 1, 0, 1), 1))};
  if (head_dist) out.push_back(head_dist->forward(squeeze(narrow(x, 1, 1, 1), 1)));
  return out;
}

std::vector<Tensor> DeiT::heads(const Tensor& features) { return {head->forward(features)}; }

std::vector<Attention*> DeiT::attention_layers() {
  std::vector<Attention*> out;
  for (auto& b : blocks) out.push_back(b->attn.get());
  return out;
}

}  // namespace sima
