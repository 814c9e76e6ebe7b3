// Patch embeddings: images (B, C, H, W) -> tokens (B, N, D) on a grid of Hp × Wp = N patches.
//
//   PatchEmbed      (timm, ViT / DeiT)  one Conv2d(C, D, k = stride = p) named `proj`
//   ConvPatchEmbed  (XCiT)              a stack of conv3x3 stride 2 pad 1 (no bias) + BatchNorm,
//                                       GELU between, each halving the grid; named as timm:
//                                       proj.0.0 (conv) proj.0.1 (bn) proj.1 (act) proj.2.0 ...
//
// Both implement TokenEmbed, so a model takes either (ModelConfig.patch_embed: conv | conv_stem)
// and gets the grid (Hp, Wp) back for the layers that need it (LPI, SOFT, positional encodings).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "nn/conv2d.h"
#include "nn/layers.h"
#include "nn/module.h"

namespace sima {

class TokenEmbed : public Module {
 public:
  TokenEmbed(const std::string& type_name, int64_t patch_size, int64_t in_chans, int64_t embed_dim)
      : Module(type_name), patch_size(patch_size), in_chans(in_chans), embed_dim(embed_dim) {}
  // images (B, C, H, W) -> tokens (B, Hp·Wp, D), row-major over the grid; Hp, Wp set.
  virtual Tensor forward(const Tensor& images, int64_t& Hp, int64_t& Wp) = 0;
  Tensor forward(const Tensor& images) override;  // the same, grid dropped
  // Grid side for an image side of `pixels` (what forward will produce).
  virtual int64_t grid_size(int64_t pixels) const = 0;

  int64_t patch_size, in_chans, embed_dim;
};

// timm PatchEmbed: proj = Conv2d(in_chans, D, kernel = stride = patch_size, bias). H and W must
// be multiples of patch_size (an error otherwise: no pixel is silently dropped).
// Init: PyTorch's Conv2d default (timm's ViT/DeiT re-initialise Linear layers only).
class PatchEmbed : public TokenEmbed {
 public:
  PatchEmbed(int64_t patch_size, int64_t in_chans, int64_t embed_dim);
  using TokenEmbed::forward;
  Tensor forward(const Tensor& images, int64_t& Hp, int64_t& Wp) override;
  int64_t grid_size(int64_t pixels) const override { return pixels / patch_size; }
  std::shared_ptr<Conv2d> proj;
};

// XCiT ConvPatchEmbed. Channel ladder per patch size (D = embed_dim):
//   16: C → D/8 → D/4 → D/2 → D   (four convs)      timm, XCiT
//    8: C → D/4 → D/2 → D         (three convs)     timm, XCiT
//    4: C → D/2 → D               (two convs)       extension for small images (not in timm)
// Each conv3x3 stride 2 pad 1 maps a side s to ceil(s/2), so any input size works; a side that
// is a multiple of patch_size gives exactly side/patch_size. D must be divisible by patch_size/2.
// act: between the conv stages ("gelu" in XCiT; timm passes the model's act_layer).
// Init: PyTorch defaults (Conv2d kaiming-uniform, BatchNorm 1/0), as timm leaves them.
class ConvPatchEmbed : public TokenEmbed {
 public:
  ConvPatchEmbed(int64_t patch_size, int64_t in_chans, int64_t embed_dim, const std::string& act = "gelu");
  using TokenEmbed::forward;
  Tensor forward(const Tensor& images, int64_t& Hp, int64_t& Wp) override;
  int64_t grid_size(int64_t pixels) const override;
  std::shared_ptr<Sequential> proj;
  int num_convs;  // 4, 3 or 2
};

// kind "conv" -> PatchEmbed, "conv_stem" -> ConvPatchEmbed; anything else is an error.
std::shared_ptr<TokenEmbed> make_patch_embed(const std::string& kind, int64_t patch_size, int64_t in_chans,
                                             int64_t embed_dim, const std::string& act = "gelu");

}  // namespace sima
