#include "models/patch_embed.h"

#include "core/error.h"
#include "core/ops/shape_ops.h"
#include "nn/normalization.h"

namespace sima {

namespace {

// (B, D, Hp, Wp) -> (B, Hp·Wp, D): x.flatten(2).transpose(1, 2).
Tensor to_tokens(const Tensor& x) { return transpose(flatten(x, 2), 1, 2); }

void check_images(const Tensor& images, int64_t in_chans, const std::string& who) {
  check(images.defined() && images.dim() == 4 && images.size(1) == in_chans, who, ": input ",
        images.defined() ? images.shape() : Shape{}, " must be (B, ", in_chans, ", H, W)");
}

}  // namespace

Tensor TokenEmbed::forward(const Tensor& images) {
  int64_t Hp = 0, Wp = 0;
  return forward(images, Hp, Wp);
}

// ---- PatchEmbed ---------------------------------------------------------------------------

PatchEmbed::PatchEmbed(int64_t p, int64_t in_chans, int64_t D) : TokenEmbed("PatchEmbed", p, in_chans, D) {
  check(p > 0, "PatchEmbed: patch_size must be positive, got ", p);
  check(in_chans > 0 && D > 0, "PatchEmbed: in_chans (", in_chans, ") and embed_dim (", D,
        ") must be positive");
  const int k = static_cast<int>(p);
  proj = register_module("proj", std::make_shared<Conv2d>(in_chans, D, k, k));  // kernel = stride = p
}

Tensor PatchEmbed::forward(const Tensor& images, int64_t& Hp, int64_t& Wp) {
  check_images(images, in_chans, "PatchEmbed");
  const int64_t H = images.size(2), W = images.size(3);
  check(H % patch_size == 0 && W % patch_size == 0, "PatchEmbed: image size ", H, "x", W,
        " is not a multiple of patch_size ", patch_size);
  Tensor x = proj->forward(images);  // (B, D, H/p, W/p)
  Hp = x.size(2);
  Wp = x.size(3);
  return to_tokens(x);  // (B, N, D)
}

// ---- ConvPatchEmbed -----------------------------------------------------------------------

ConvPatchEmbed::ConvPatchEmbed(int64_t p, int64_t in_chans, int64_t D, const std::string& act)
    : TokenEmbed("ConvPatchEmbed", p, in_chans, D) {
  check(p == 16 || p == 8 || p == 4, "ConvPatchEmbed: patch_size ", p,
        " is not supported (allowed: 16, 8, 4)");
  check(in_chans > 0, "ConvPatchEmbed: in_chans must be positive, got ", in_chans);
  check(D > 0 && D % (p / 2) == 0, "ConvPatchEmbed: embed_dim ", D, " must be a positive multiple of ",
        p / 2, " for patch_size ", p, " (channel ladder down to D/", p / 2, ")");
  num_convs = p == 16 ? 4 : p == 8 ? 3 : 2;
  proj = register_module("proj", std::make_shared<Sequential>());
  // Widths: D / 2^(num_convs-1), ..., D/2, D.
  int64_t cin = in_chans;
  for (int i = 0; i < num_convs; ++i) {
    const int64_t cout = D >> (num_convs - 1 - i);
    auto stage = std::make_shared<Sequential>();  // timm's conv3x3(): Conv2d + BatchNorm2d
    stage->push_back(std::make_shared<Conv2d>(cin, cout, 3, 2, 1, 1, /*bias=*/false));
    stage->push_back(std::make_shared<BatchNorm2d>(cout));
    proj->push_back(stage);
    if (i + 1 < num_convs) proj->push_back(make_activation(act));
    cin = cout;
  }
}

int64_t ConvPatchEmbed::grid_size(int64_t pixels) const {
  for (int i = 0; i < num_convs; ++i) pixels = (pixels + 1) / 2;  // conv3x3 s2 p1: ceil(s/2)
  return pixels;
}

Tensor ConvPatchEmbed::forward(const Tensor& images, int64_t& Hp, int64_t& Wp) {
  check_images(images, in_chans, "ConvPatchEmbed");
  Tensor x = proj->forward(images);  // (B, D, ceil(H/p), ceil(W/p))
  Hp = x.size(2);
  Wp = x.size(3);
  return to_tokens(x);  // (B, N, D)
}

// ---- factory ------------------------------------------------------------------------------

std::shared_ptr<TokenEmbed> make_patch_embed(const std::string& kind, int64_t patch_size, int64_t in_chans,
                                             int64_t embed_dim, const std::string& act) {
  if (kind == "conv") return std::make_shared<PatchEmbed>(patch_size, in_chans, embed_dim);
  if (kind == "conv_stem") return std::make_shared<ConvPatchEmbed>(patch_size, in_chans, embed_dim, act);
  fail("patch_embed '", kind, "' is unknown (allowed: conv, conv_stem)");
}

}  // namespace sima
