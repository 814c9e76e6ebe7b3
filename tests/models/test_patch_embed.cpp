// Patch embeddings (models/patch_embed.h): timm's PatchEmbed and XCiT's ConvPatchEmbed.
// Shapes and grids, timm state-dict names, parameter counts by hand, token order, the
// errors, and gradchecks w.r.t. the images and every parameter.
#include "testing.h"

#include <set>
#include <string>

#include "models/patch_embed.h"

using namespace sima;
using namespace sima::testing;

namespace {

std::set<std::string> names_of(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::set<std::string> s;
  for (auto& [n, t] : named) s.insert(n);
  return s;
}
Shape shape_of(Module& m, const std::string& name) {
  for (auto& [n, t] : m.named_parameters())
    if (n == name) return t.shape();
  for (auto& [n, t] : m.named_buffers())
    if (n == name) return t.shape();
  FAIL("no parameter or buffer named " << name);
  return {};
}
// Moderate random values in every parameter (the defaults hide mistakes).
void randomise(Module& m, uint64_t seed) {
  Generator g(seed);
  for (auto& [n, p] : m.named_parameters()) g.fill_uniform(p.data(), p.numel(), -0.6f, 0.6f);
}
void gradcheck_module(TokenEmbed& m, const Tensor& x) {
  std::vector<Tensor> inputs{x};
  for (auto& [n, p] : m.named_parameters()) inputs.push_back(p);
  CHECK_GRADCHECK([&](const std::vector<Tensor>& v) { return m.forward(v[0]); }, inputs);
}

}  // namespace

TEST_CASE("PatchEmbed: shapes, grid, names, parameter count") {
  PatchEmbed pe(16, 3, 24);
  int64_t Hp = 0, Wp = 0;
  Tensor t = pe.forward(randn({2, 3, 32, 48}), Hp, Wp);
  CHECK(t.shape() == Shape{2, 6, 24});
  CHECK(Hp == 2);
  CHECK(Wp == 3);
  CHECK(pe.grid_size(224) == 14);
  CHECK(names_of(pe.named_parameters()) == std::set<std::string>{"proj.weight", "proj.bias"});
  CHECK(shape_of(pe, "proj.weight") == Shape{24, 3, 16, 16});
  // Conv2d(3, 24, 16, 16): weight 3·16·16·24 + bias 24.
  CHECK(pe.num_parameters() == 3 * 16 * 16 * 24 + 24);
  // DeiT-S's embedding: 3·16·16·384 + 384 = 295296 (timm deit_small_patch16_224 patch_embed.proj).
  CHECK(PatchEmbed(16, 3, 384).num_parameters() == 295296);
}

TEST_CASE("PatchEmbed: token n = conv output at grid row n / Wp, column n % Wp") {
  PatchEmbed pe(4, 2, 5);
  Tensor img = randn({1, 2, 8, 12});
  int64_t Hp = 0, Wp = 0;
  Tensor t = pe.forward(img, Hp, Wp);
  REQUIRE(Hp == 2);
  REQUIRE(Wp == 3);
  Tensor conv = pe.proj->forward(img);  // (1, 5, 2, 3)
  for (int64_t i = 0; i < Hp; ++i)
    for (int64_t j = 0; j < Wp; ++j)
      for (int64_t c = 0; c < 5; ++c) CHECK(t.at({0, i * Wp + j, c}) == conv.at({0, c, i, j}));
  // One output pixel by hand: Σ over the 2×4×4 patch of w·x + b.
  float s = pe.proj->bias.at({1});
  for (int64_t ci = 0; ci < 2; ++ci)
    for (int64_t y = 0; y < 4; ++y)
      for (int64_t x = 0; x < 4; ++x) s += pe.proj->weight.at({1, ci, y, x}) * img.at({0, ci, 4 + y, 8 + x});
  CHECK(t.at({0, 1 * 3 + 2, 1}) == doctest::Approx(s).epsilon(1e-5));
}

TEST_CASE("PatchEmbed: errors name the problem") {
  PatchEmbed pe(16, 3, 8);
  CHECK_THROWS_WITH_AS(pe.forward(randn({1, 3, 40, 32})), doctest::Contains("patch_size"), Error);
  CHECK_THROWS_WITH_AS(pe.forward(randn({1, 1, 32, 32})), doctest::Contains("(B, 3, H, W)"), Error);
  CHECK_THROWS_AS(pe.forward(randn({3, 32, 32})), Error);
  CHECK_THROWS_AS(PatchEmbed(0, 3, 8), Error);
}

TEST_CASE("ConvPatchEmbed: timm names, ladders for patch 16 / 8 / 4, counts by hand") {
  SUBCASE("patch 16: 3 -> D/8 -> D/4 -> D/2 -> D") {
    ConvPatchEmbed pe(16, 3, 384);
    CHECK(pe.num_convs == 4);
    const auto names = names_of(pe.named_parameters());
    for (std::string s : {"proj.0.0.weight", "proj.0.1.weight", "proj.0.1.bias", "proj.2.0.weight",
                          "proj.2.1.weight", "proj.4.0.weight", "proj.4.1.bias", "proj.6.0.weight",
                          "proj.6.1.weight", "proj.6.1.bias"})
      CHECK_MESSAGE(names.count(s) == 1, s);
    CHECK(names.count("proj.0.0.bias") == 0);  // conv3x3 without bias
    CHECK(names.size() == 12);                 // 4 × (conv weight, bn weight, bn bias)
    const auto buffers = names_of(pe.named_buffers());
    CHECK(buffers.count("proj.0.1.running_mean") == 1);
    CHECK(buffers.count("proj.6.1.running_var") == 1);
    CHECK(shape_of(pe, "proj.0.0.weight") == Shape{48, 3, 3, 3});
    CHECK(shape_of(pe, "proj.2.0.weight") == Shape{96, 48, 3, 3});
    CHECK(shape_of(pe, "proj.4.0.weight") == Shape{192, 96, 3, 3});
    CHECK(shape_of(pe, "proj.6.0.weight") == Shape{384, 192, 3, 3});
    // conv 9·cin·cout (no bias) + BatchNorm 2·cout, per stage (XCiT-S12/16's stem):
    const int64_t expected = (9 * 3 * 48 + 2 * 48) + (9 * 48 * 96 + 2 * 96) + (9 * 96 * 192 + 2 * 192) +
                             (9 * 192 * 384 + 2 * 384);
    CHECK(expected == 873648);
    CHECK(pe.num_parameters() == expected);
    CHECK(pe.grid_size(224) == 14);
    CHECK(pe.grid_size(40) == 3);  // 40 -> 20 -> 10 -> 5 -> 3 (ceil at every stride-2 conv)
  }
  SUBCASE("patch 8: 3 -> D/4 -> D/2 -> D") {
    ConvPatchEmbed pe(8, 3, 192);
    CHECK(pe.num_convs == 3);
    CHECK(shape_of(pe, "proj.0.0.weight") == Shape{48, 3, 3, 3});
    CHECK(shape_of(pe, "proj.4.0.weight") == Shape{192, 96, 3, 3});
    CHECK(names_of(pe.named_parameters()).count("proj.6.0.weight") == 0);
    const int64_t expected = (9 * 3 * 48 + 2 * 48) + (9 * 48 * 96 + 2 * 96) + (9 * 96 * 192 + 2 * 192);
    CHECK(pe.num_parameters() == expected);  // 209328 (XCiT-T12/8's stem)
    CHECK(pe.grid_size(224) == 28);
  }
  SUBCASE("patch 4 (extension): 3 -> D/2 -> D") {
    ConvPatchEmbed pe(4, 3, 32);
    CHECK(pe.num_convs == 2);
    CHECK(shape_of(pe, "proj.0.0.weight") == Shape{16, 3, 3, 3});
    CHECK(shape_of(pe, "proj.2.0.weight") == Shape{32, 16, 3, 3});
    CHECK(pe.num_parameters() == (9 * 3 * 16 + 2 * 16) + (9 * 16 * 32 + 2 * 32));
    CHECK(pe.grid_size(32) == 8);
  }
}

TEST_CASE("ConvPatchEmbed: forward shapes and grid for several sizes") {
  struct C { int64_t p, H, W, Hp, Wp; };
  for (C c : {C{16, 32, 32, 2, 2}, C{16, 48, 64, 3, 4}, C{16, 40, 40, 3, 3}, C{8, 32, 32, 4, 4},
              C{8, 48, 32, 6, 4}, C{4, 28, 28, 7, 7}}) {
    CAPTURE(c.p);
    CAPTURE(c.H);
    ConvPatchEmbed pe(c.p, 3, 16);
    int64_t Hp = 0, Wp = 0;
    Tensor t = pe.forward(randn({2, 3, c.H, c.W}), Hp, Wp);
    CHECK(Hp == c.Hp);
    CHECK(Wp == c.Wp);
    CHECK(pe.grid_size(c.H) == c.Hp);
    CHECK(t.shape() == Shape{2, c.Hp * c.Wp, 16});
  }
}

TEST_CASE("ConvPatchEmbed: errors name the field and the allowed values") {
  CHECK_THROWS_WITH_AS(ConvPatchEmbed(12, 3, 64), doctest::Contains("allowed: 16, 8, 4"), Error);
  CHECK_THROWS_WITH_AS(ConvPatchEmbed(16, 3, 100), doctest::Contains("embed_dim 100"), Error);
  CHECK_THROWS_WITH_AS(ConvPatchEmbed(8, 3, 6), doctest::Contains("multiple of 4"), Error);
  CHECK_THROWS_AS(ConvPatchEmbed(16, 3, 64, "swish"), Error);
  ConvPatchEmbed pe(8, 3, 16);
  CHECK_THROWS_WITH_AS(pe.forward(randn({1, 4, 16, 16})), doctest::Contains("(B, 3, H, W)"), Error);
}

TEST_CASE("make_patch_embed: conv | conv_stem") {
  auto a = make_patch_embed("conv", 16, 3, 32);
  auto b = make_patch_embed("conv_stem", 16, 3, 32);
  CHECK(dynamic_cast<PatchEmbed*>(a.get()) != nullptr);
  CHECK(dynamic_cast<ConvPatchEmbed*>(b.get()) != nullptr);
  CHECK(a->forward(randn({1, 3, 32, 32})).shape() == Shape{1, 4, 32});
  CHECK(b->forward(randn({1, 3, 32, 32})).shape() == Shape{1, 4, 32});
  CHECK_THROWS_WITH_AS(make_patch_embed("linear", 16, 3, 32), doctest::Contains("allowed: conv, conv_stem"),
                       Error);
}

TEST_CASE("PatchEmbed: gradcheck w.r.t. images and parameters") {
  PatchEmbed pe(2, 2, 3);
  randomise(pe, 1);
  gradcheck_module(pe, randn_leaf({2, 2, 4, 6}, 2));
}

TEST_CASE("ConvPatchEmbed: gradcheck w.r.t. images and parameters, train and eval") {
  for (bool training : {true, false}) {
    CAPTURE(training);
    ConvPatchEmbed pe(8, 2, 8);
    randomise(pe, 3);
    pe.train(training);
    gradcheck_module(pe, randn_leaf({2, 2, 16, 16}, 4));
  }
}
