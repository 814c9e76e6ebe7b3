// XCiT (models/xcit.h): exact parameter counts of the reference sizes, worked out by hand and
// compared with the published counts; timm state-dict names; init; every attention variant
// forward + backward; a gradcheck of a whole tiny model; other input sizes; the class-attention
// quirks; the Fourier positional encoding; config errors.
#include "testing.h"

#include <cmath>
#include <map>
#include <set>
#include <string>

#include "core/parallel.h"
#include "models/xcit.h"
#include "nn/attention/variants.h"
#include "nn/attention/xca.h"

using namespace sima;
using namespace sima::testing;

namespace {

// Every row of the variant table (nn/attention/variants.h).
const std::vector<std::string> kVariants = attention_variant_names();

// A small XCiT: 32×32 RGB, patch 8 (a 4×4 grid), width 32, 2 heads, depth 2, 10 classes.
ModelConfig tiny_config(const std::string& variant = "xca") {
  ModelConfig c;
  c.arch = "xcit";
  c.patch_embed = "conv_stem";
  c.img_size = 32;
  c.patch_size = 8;
  c.embed_dim = 32;
  c.depth = 2;
  c.num_heads = 2;
  c.num_classes = 10;
  c.eta = 1.f;
  c.tokens_norm = true;
  c.attention.variant = variant;
  if (variant == "nystromformer") c.attention.with("num_landmarks", 4);  // <= the 16 tokens
  return c;
}

std::map<std::string, Tensor> by_name(const std::vector<std::pair<std::string, Tensor>>& named) {
  return {named.begin(), named.end()};
}


// Parameter count of an XCiT, term by term (D width, L depth, h heads, p patch, K classes,
// MLP hidden 4D, 2 class-attention blocks). `temperature` is 1 for XCA (τ: h per block), 0 else.
int64_t xcit_count_by_hand(int64_t D, int64_t L, int64_t h, int64_t p, int64_t K, int temperature) {
  // ConvPatchEmbed: per stage conv3x3 no bias 9·cin·cout + BatchNorm 2·cout.
  int64_t stem = 0;
  if (p == 16)
    stem = (9 * 3 * (D / 8) + 2 * (D / 8)) + (9 * (D / 8) * (D / 4) + 2 * (D / 4)) +
           (9 * (D / 4) * (D / 2) + 2 * (D / 2)) + (9 * (D / 2) * D + 2 * D);
  else  // p == 8
    stem = (9 * 3 * (D / 4) + 2 * (D / 4)) + (9 * (D / 4) * (D / 2) + 2 * (D / 2)) +
           (9 * (D / 2) * D + 2 * D);
  const int64_t cls_token = D;
  const int64_t pos_embed = 64 * D + D;  // token_projection: Conv2d(64, D, 1) with bias
  const int64_t block = 2 * D                   // norm1
                        + temperature * h       // attn.temperature (h, 1, 1)
                        + (D * 3 * D + 3 * D)   // attn.qkv
                        + (D * D + D)           // attn.proj
                        + 2 * D                 // norm3
                        + (9 * D + D)           // local_mp.conv1 (depthwise 3×3, bias)
                        + 2 * D                 // local_mp.bn
                        + (9 * D + D)           // local_mp.conv2
                        + 2 * D                 // norm2
                        + (D * 4 * D + 4 * D)   // mlp.fc1
                        + (4 * D * D + D)       // mlp.fc2
                        + 3 * D;                // gamma1, gamma3, gamma2
  const int64_t ca_block = 2 * D                  // norm1
                           + (D * 3 * D + 3 * D)  // attn.qkv
                           + (D * D + D)          // attn.proj
                           + 2 * D                // norm2
                           + (D * 4 * D + 4 * D) + (4 * D * D + D)  // mlp
                           + 2 * D;                                 // gamma1, gamma2
  const int64_t norm = 2 * D, head = D * K + K;
  return stem + cls_token + pos_embed + L * block + 2 * ca_block + norm + head;
}

ModelConfig preset(const std::string& name, const std::string& variant) {
  ModelConfig c = xcit_config(name);
  c.attention.variant = variant;
  return c;
}

}  // namespace

// Published counts (timm registrations, 224×224, 1000 classes) from open-mmlab/mmpretrain
// configs/xcit/metafile.yml ("Parameters:" of the models converted from facebookresearch/xcit):
//   xcit-tiny-12-p8 6706504, xcit-tiny-24-p16 12116896, xcit-small-12-p16 26253304,
//   xcit-nano-12-p16 3053224. (timm / the paper round them to 6.7M / 12.1M / 26.3M / 3.1M.)
TEST_CASE("XCiT: exact parameter counts of the reference sizes, and their SimA twins") {
  struct Ref { const char* name; int64_t D, L, h, p, published; };
  const Ref refs[] = {{"xcit_tiny_12_p8", 192, 12, 4, 8, 6706504},
                      {"xcit_tiny_24_p16", 192, 24, 4, 16, 12116896},
                      {"xcit_small_12_p16", 384, 12, 8, 16, 26253304},
                      {"xcit_nano_12_p16", 128, 12, 4, 16, 3053224}};
  for (const Ref& r : refs) {
    CAPTURE(r.name);
    const int64_t by_hand = xcit_count_by_hand(r.D, r.L, r.h, r.p, 1000, 1);
    CHECK(by_hand == r.published);
    if (std::string(r.name) == "xcit_nano_12_p16") continue;  // not one of the paper's sizes: hand only
    CHECK(XCiT(xcit_config(r.name)).num_parameters() == by_hand);
    // The SimA twin: the same trunk without the XCA temperatures (h per block).
    CHECK(XCiT(preset(r.name, "sima")).num_parameters() == by_hand - r.L * r.h);
  }
  // Worked out: T12/8  = 209328 + 192 + 12480 + 12·450052 + 2·445248 + 384 + 193000   = 6706504
  //             T24/16 = 219096 + 192 + 12480 + 24·450052 + 2·445248 + 384 + 193000   = 12116896
  //             S12/16 = 873648 + 384 + 24960 + 12·1784840 + 2·1775232 + 768 + 385000 = 26253304
  CHECK(xcit_count_by_hand(192, 12, 4, 8, 1000, 0) == 6706504 - 48);    // SimA-T12/8  6706456
  CHECK(xcit_count_by_hand(192, 24, 4, 16, 1000, 0) == 12116896 - 96);  // SimA-T24/16 12116800
  CHECK(xcit_count_by_hand(384, 12, 8, 16, 1000, 0) == 26253304 - 96);  // SimA-S12/16 26253208
}

TEST_CASE("XCiT: presets carry timm's (tokens_norm, eta)") {
  struct P { const char* name; int64_t D, L, h, p; float eta; bool tokens_norm; };
  for (P p : {P{"xcit_tiny_12_p8", 192, 12, 4, 8, 1.f, true},
              P{"xcit_tiny_24_p16", 192, 24, 4, 16, 1e-5f, true},
              P{"xcit_small_12_p16", 384, 12, 8, 16, 1.f, true},
              P{"xcit_nano_12_p16", 128, 12, 4, 16, 1.f, false}}) {
    CAPTURE(p.name);
    ModelConfig c = xcit_config(p.name);
    CHECK(c.arch == "xcit");
    CHECK(c.embed_dim == p.D);
    CHECK(c.depth == p.L);
    CHECK(c.num_heads == p.h);
    CHECK(c.patch_size == p.p);
    CHECK(c.eta == p.eta);
    CHECK(c.tokens_norm == p.tokens_norm);
    CHECK(c.cls_attn_layers == 2);
    CHECK(c.attention.variant == "xca");
  }
  CHECK_THROWS_WITH_AS(xcit_config("xcit_huge"), doctest::Contains("xcit_tiny_12_p8"), Error);
}

TEST_CASE("XCiT: named_parameters are timm's state-dict names, with their shapes") {
  XCiT m(tiny_config());  // D 32, patch 8, heads 2, depth 2, 2 class-attention blocks, 10 classes
  auto params = by_name(m.named_parameters());
  const std::map<std::string, Shape> expected = {
      {"patch_embed.proj.0.0.weight", {8, 3, 3, 3}},
      {"patch_embed.proj.0.1.weight", {8}},
      {"patch_embed.proj.0.1.bias", {8}},
      {"patch_embed.proj.2.0.weight", {16, 8, 3, 3}},
      {"patch_embed.proj.4.0.weight", {32, 16, 3, 3}},
      {"patch_embed.proj.4.1.bias", {32}},
      {"cls_token", {1, 1, 32}},
      {"pos_embed.token_projection.weight", {32, 64, 1, 1}},
      {"pos_embed.token_projection.bias", {32}},
      {"blocks.0.norm1.weight", {32}},
      {"blocks.0.norm1.bias", {32}},
      {"blocks.0.attn.temperature", {2, 1, 1}},
      {"blocks.0.attn.qkv.weight", {96, 32}},
      {"blocks.0.attn.qkv.bias", {96}},
      {"blocks.0.attn.proj.weight", {32, 32}},
      {"blocks.0.attn.proj.bias", {32}},
      {"blocks.0.norm3.weight", {32}},
      {"blocks.0.local_mp.conv1.weight", {32, 1, 3, 3}},
      {"blocks.0.local_mp.conv1.bias", {32}},
      {"blocks.0.local_mp.bn.weight", {32}},
      {"blocks.0.local_mp.bn.bias", {32}},
      {"blocks.0.local_mp.conv2.weight", {32, 1, 3, 3}},
      {"blocks.0.local_mp.conv2.bias", {32}},
      {"blocks.0.norm2.weight", {32}},
      {"blocks.0.mlp.fc1.weight", {128, 32}},
      {"blocks.0.mlp.fc1.bias", {128}},
      {"blocks.0.mlp.fc2.weight", {32, 128}},
      {"blocks.1.mlp.fc2.bias", {32}},
      {"blocks.0.gamma1", {32}},
      {"blocks.0.gamma2", {32}},
      {"blocks.1.gamma3", {32}},
      {"cls_attn_blocks.0.norm1.weight", {32}},
      {"cls_attn_blocks.0.attn.qkv.weight", {96, 32}},
      {"cls_attn_blocks.0.attn.qkv.bias", {96}},
      {"cls_attn_blocks.0.attn.proj.weight", {32, 32}},
      {"cls_attn_blocks.0.norm2.bias", {32}},
      {"cls_attn_blocks.1.mlp.fc1.weight", {128, 32}},
      {"cls_attn_blocks.1.mlp.fc2.weight", {32, 128}},
      {"cls_attn_blocks.1.gamma1", {32}},
      {"cls_attn_blocks.1.gamma2", {32}},
      {"norm.weight", {32}},
      {"norm.bias", {32}},
      {"head.weight", {10, 32}},
      {"head.bias", {10}},
  };
  for (auto& [name, shape] : expected) {
    CAPTURE(name);
    REQUIRE(params.count(name) == 1);
    CHECK(params[name].shape() == shape);
  }
  // Nothing else: 3·3 stem + cls + 2 pos + 2 blocks × 22 + 2 class blocks × 16 + 2 norm + 2 head.
  CHECK(params.size() == 9 + 1 + 2 + 2 * 22 + 2 * 16 + 2 + 2);
  CHECK(params.count("blocks.2.norm1.weight") == 0);
  CHECK(params.count("cls_attn_blocks.2.norm1.weight") == 0);
  CHECK(params.count("cls_attn_blocks.0.gamma3") == 0);
  auto buffers = by_name(m.named_buffers());
  for (std::string b : {"patch_embed.proj.0.1.running_mean", "patch_embed.proj.4.1.running_var",
                        "blocks.0.local_mp.bn.running_mean", "blocks.1.local_mp.bn.running_var"})
    CHECK_MESSAGE(buffers.count(b) == 1, b);
  CHECK(buffers.count("blocks.1.local_mp.bn.num_batches_tracked") == 1);
  // 3 stem BatchNorms + 1 LPI BatchNorm per block, each running_mean, running_var, num_batches_tracked
  CHECK(buffers.size() == 3 * 3 + 2 * 3);
  // The SimA twin: the same names minus the temperatures.
  auto sima = by_name(XCiT(tiny_config("sima")).named_parameters());
  CHECK(sima.size() == params.size() - 2);
  CHECK(sima.count("blocks.0.attn.temperature") == 0);
  CHECK(sima.count("blocks.0.attn.qkv.weight") == 1);
}

TEST_CASE("XCiT: initialisation as timm") {
  ModelConfig c = tiny_config();
  c.eta = 1e-5f;  // as XCiT-T24/16
  XCiT m(c);
  auto p = by_name(m.named_parameters());
  for (std::string g : {"blocks.0.gamma1", "blocks.1.gamma3", "blocks.1.gamma2", "cls_attn_blocks.1.gamma1",
                        "cls_attn_blocks.0.gamma2"})
    for (float v : to_vector(p[g])) CHECK(v == 1e-5f);
  for (float v : to_vector(p["blocks.0.attn.temperature"])) CHECK(v == 1.f);
  for (std::string n : {"blocks.0.norm1", "blocks.0.norm3", "cls_attn_blocks.1.norm2", "norm"}) {
    for (float v : to_vector(p[n + ".weight"])) CHECK(v == 1.f);
    for (float v : to_vector(p[n + ".bias"])) CHECK(v == 0.f);
  }
  // Every Linear: trunc_normal(std .02) (|w| <= 2 for timm's absolute bounds), bias 0.
  for (std::string n : {"blocks.0.attn.qkv", "blocks.1.attn.proj", "blocks.0.mlp.fc1",
                        "cls_attn_blocks.0.attn.qkv",
                        "cls_attn_blocks.1.mlp.fc2", "head"}) {
    CAPTURE(n);
    for (float v : to_vector(p[n + ".bias"])) CHECK(v == 0.f);
    const std::vector<float> w = to_vector(p[n + ".weight"]);
    double s2 = 0;
    for (float v : w) s2 += double(v) * v;
    const double rms = std::sqrt(s2 / w.size());  // PyTorch's default would be 1/√(3·fan_in) ≈ .1
    CHECK(rms > 0.017);
    CHECK(rms < 0.023);
  }
  // cls_token trunc_normal(.02) too: non-zero, small.
  const std::vector<float> cls = to_vector(m.cls_token);
  double s2 = 0;
  for (float v : cls) s2 += double(v) * v;
  CHECK(std::sqrt(s2 / cls.size()) > 0.005);
  CHECK(std::sqrt(s2 / cls.size()) < 0.05);
}

TEST_CASE("XCiT: every attention variant runs forward + backward; a gradient reaches every parameter") {
  // Adaptations: soft gets the token grid (Hp, Wp) from the blocks (here 4×4 >= sr = 2); the
  // class-attention layers take the form of the variant's traits.class_attention.
  const Tensor images = randn_leaf({2, 3, 32, 32}, 7, false);
  for (const std::string& variant : kVariants) {
    CAPTURE(variant);
    XCiT m(tiny_config(variant));
    m.train();
    REQUIRE(m.attention_layers().size() == 2);
    CHECK(m.attention_layers()[0]->options().variant == variant);
    CHECK(m.cls_attn_blocks[0]->attn->options().variant == attention_variant(variant).traits.class_attention);
    Tensor feats = m.forward_features(images);
    CHECK(feats.shape() == Shape{2, 32});
    Tensor logits = m.heads(feats)[0];
    CHECK(logits.shape() == Shape{2, 10});
    CHECK(all_finite(logits));
    Generator g(3);
    logits.backward(randn(logits.shape(), g));
    for (auto& [name, t] : m.named_parameters()) {
      CAPTURE(name);
      Tensor gr = t.grad();
      REQUIRE(gr.defined());
      CHECK(all_finite(gr));
      float mx = 0.f;
      for (float v : to_vector(gr)) mx = std::fmax(mx, std::fabs(v));
      CHECK(mx > 0.f);
    }
  }
}

TEST_CASE("XCiT: forward, forward_heads, eval mode, patch 16 and nano-style tokens_norm = false") {
  ModelConfig c = tiny_config();
  c.patch_size = 16;  // 32×32 -> a 2×2 grid
  c.tokens_norm = false;
  XCiT m(c);
  m.eval();
  Tensor x = randn({3, 3, 32, 32});
  Tensor y = m.forward(x);
  CHECK(y.shape() == Shape{3, 10});
  CHECK(all_finite(y));
  auto hs = m.forward_heads(x);
  REQUIRE(hs.size() == 1);
  CHECK(max_abs_diff(hs[0], y) == 0.f);
  // num_classes = 0: no head, the features come out (timm's Identity head).
  c.num_classes = 0;
  XCiT f(c);
  CHECK(f.forward(x).shape() == Shape{3, 32});
  CHECK(by_name(f.named_parameters()).count("head.weight") == 0);
}

TEST_CASE("XCiT: gradcheck of a whole tiny model w.r.t. the images and every parameter") {
  // 16×16 images, patch 8 (2×2 grid), width 8, 2 heads, depth 1, 2 class-attention blocks,
  // MLP ratio 2, 3 classes; BatchNorm in train mode (batch statistics). XCA and softmax class
  // attention are smooth (no kink), so finite differences hold everywhere.
  ModelConfig c = tiny_config("xca");
  c.img_size = 16;
  c.embed_dim = 8;
  c.depth = 1;
  c.mlp_ratio = 2.f;
  c.num_classes = 3;
  XCiT m(c);
  // Moderate values everywhere (timm's .02 init would make every gradient tiny).
  Generator g(5);
  for (auto& [name, p] : m.named_parameters()) {
    std::vector<float> v = to_vector(p);
    for (float& e : v) e += 0.3f * g.normal();
    std::copy(v.begin(), v.end(), p.data());
  }
  std::vector<Tensor> inputs{randn_leaf({2, 3, 16, 16}, 6)};
  for (auto& [name, p] : m.named_parameters()) inputs.push_back(p);
  // ~4600 elements × 2 forwards of a model whose every op is tiny: one thread is faster (and
  // far faster on a loaded machine) than waking a second one for each small parallel loop.
  const int threads = num_threads();
  set_num_threads(1);
  CHECK_GRADCHECK([&](const std::vector<Tensor>& v) { return m.forward(v[0]); }, inputs);
  set_num_threads(threads);
}

TEST_CASE("XCiT: another input size than configured (32 -> 48, and not a multiple of the patch)") {
  for (int64_t p : {16, 8}) {
    CAPTURE(p);
    ModelConfig c = tiny_config("sima");
    c.patch_size = p;
    XCiT m(c);
    struct S { int64_t H, W; };
    for (S s : {S{32, 32}, S{48, 48}, S{48, 32}, S{40, 40}}) {
      CAPTURE(s.H);
      CAPTURE(s.W);
      Tensor x = randn({2, 3, s.H, s.W});
      int64_t Hp = 0, Wp = 0;
      Tensor tokens = m.patch_embed->forward(x, Hp, Wp);
      CHECK(Hp == (s.H + p - 1) / p);
      CHECK(Wp == (s.W + p - 1) / p);
      CHECK(tokens.shape() == Shape{2, Hp * Wp, 32});
      CHECK(m.pos_embed->forward(Hp, Wp).shape() == Shape{1, Hp * Wp, 32});
      Tensor y = m.forward(x);
      CHECK(y.shape() == Shape{2, 10});
      CHECK(all_finite(y));
    }
  }
  // SOFT too, whose bottleneck works on the grid: 48×48 with patch 8 is a 6×6 grid.
  XCiT soft(tiny_config("soft"));
  CHECK(soft.forward(randn({1, 3, 48, 48})).shape() == Shape{1, 10});
}

TEST_CASE("Fourier positional encoding: hand values, channel layout, grid sizes") {
  // H = 2, W = 3. Row i: y = (i+1)/2·2π; column j: x = (j+1)/3·2π (the 1e-6 is below float precision).
  Tensor f = fourier_features(2, 3);
  REQUIRE(f.shape() == Shape{1, 64, 2, 3});
  const float pi = 3.14159265358979f;
  // channel 0 = sin(y), channel 1 = cos(y) (t = 1); the same for every column.
  for (int64_t j = 0; j < 3; ++j) {
    CHECK(f.at({0, 0, 0, j}) == doctest::Approx(0.0).epsilon(1e-5));  // sin(π)
    CHECK(f.at({0, 1, 0, j}) == doctest::Approx(-1.0).epsilon(1e-5));  // cos(π)
    CHECK(f.at({0, 1, 1, j}) == doctest::Approx(1.0).epsilon(1e-5));   // cos(2π)
  }
  // channels 32 + c from the column: channel 32 = sin(x), 33 = cos(x); the same for every row.
  for (int64_t i = 0; i < 2; ++i) {
    CHECK(f.at({0, 32, i, 0}) == doctest::Approx(std::sin(2 * pi / 3)).epsilon(1e-5));
    CHECK(f.at({0, 33, i, 1}) == doctest::Approx(std::cos(4 * pi / 3)).epsilon(1e-5));
  }
  // channel 2: t = 10000^(2/32); channel 3 shares it with cos.
  const double t = std::pow(10000.0, 2.0 / 32);
  CHECK(f.at({0, 2, 0, 0}) == doctest::Approx(std::sin(M_PI / t)).epsilon(1e-5));
  CHECK(f.at({0, 3, 0, 0}) == doctest::Approx(std::cos(M_PI / t)).epsilon(1e-5));
  const double t30 = std::pow(10000.0, 30.0 / 32);  // channel 31 (cos), from the column
  CHECK(f.at({0, 63, 0, 2}) == doctest::Approx(std::cos(2 * M_PI / t30)).epsilon(1e-5));

  // The module: token n = (row n / W, column n % W) of token_projection(features).
  PositionalEncodingFourier pe(4);
  Tensor pos = pe.forward(2, 3);
  REQUIRE(pos.shape() == Shape{1, 6, 4});
  Tensor proj = pe.token_projection->forward(f);  // (1, 4, 2, 3)
  for (int64_t n = 0; n < 6; ++n)
    for (int64_t c = 0; c < 4; ++c) CHECK(pos.at({0, n, c}) == proj.at({0, c, n / 3, n % 3}));
  CHECK(pe.forward(7, 5).shape() == Shape{1, 35, 4});
  CHECK_THROWS_AS(fourier_features(0, 3), Error);
}

TEST_CASE("ClassAttentionBlock: the residual quirks of timm, tokens_norm both ways") {
  // Patch tokens: y = x + γ1·norm1(x) (attn passes norm1(x)[:, 1:] through), then
  // tokens_norm: y = norm2(y); out = 2·y.   Without: out = 2·y (norm2 on the class token only).
  // Class token: u = y_cls (after norm2), out = u + γ2·mlp(u).
  for (bool tokens_norm : {true, false}) {
    CAPTURE(tokens_norm);
    XCiTBlockOptions bo;
    bo.dim = 8;
    ClassAttentionOptions co;
    co.dim = 8;
    co.num_heads = 2;
    ClassAttentionBlock blk(bo, co, tokens_norm);
    Generator g(9);
    for (auto& [name, p] : blk.named_parameters()) g.fill_normal(p.data(), p.numel(), 0.5f, 0.5f);
    Tensor x = randn({2, 5, 8});
    Tensor out = blk.forward(x);
    REQUIRE(out.shape() == Shape{2, 5, 8});

    Tensor u = blk.norm1->forward(x);
    Tensor y = add(x, mul(blk.attn->forward(u), blk.gamma1));
    if (tokens_norm) y = blk.norm2->forward(y);
    Tensor patches = slice(y, 1, 1, 5);
    check_close(slice(out, 1, 1, 5), add(patches, patches), 1e-5f, 1e-5f);
    Tensor cls = slice(y, 1, 0, 1);
    if (!tokens_norm) cls = blk.norm2->forward(cls);
    check_close(slice(out, 1, 0, 1), add(cls, mul(blk.mlp->forward(cls), blk.gamma2)), 1e-5f, 1e-5f);
  }
}

TEST_CASE("XCABlock and LPI: residuals in the order attn, LPI, MLP, each scaled by its own gamma") {
  XCiTBlockOptions bo;
  bo.dim = 8;
  AttentionOptions ao;
  ao.variant = "xca";
  ao.dim = 8;
  ao.num_heads = 2;
  XCABlock blk(bo, ao);
  Generator g(21);
  for (auto& [name, p] : blk.named_parameters()) g.fill_normal(p.data(), p.numel(), 0.3f, 0.5f);
  blk.eval();  // BatchNorm on running statistics: the composition below sees the same numbers
  const int64_t H = 2, W = 3;
  Tensor x = randn({2, H * W, 8});
  Tensor out = blk.forward(x, H, W);

  // LPI by hand: tokens to (B, C, H, W), conv1 -> GELU -> bn -> conv2, back to tokens.
  auto lpi = [&](const Tensor& t) {
    Tensor img = reshape(permute(t, {0, 2, 1}), {2, 8, H, W});
    LPI& l = *blk.local_mp;
    Tensor y = conv2d(img, l.conv1->weight, l.conv1->bias, 1, 1, 8);
    y = batch_norm2d(gelu(y), l.bn->weight, l.bn->bias, l.bn->running_mean, l.bn->running_var, false);
    y = conv2d(y, l.conv2->weight, l.conv2->bias, 1, 1, 8);
    return permute(reshape(y, {2, 8, H * W}), {0, 2, 1});
  };
  Tensor y = add(x, mul(blk.attn->forward(blk.norm1->forward(x), H, W), blk.gamma1));
  y = add(y, mul(lpi(blk.norm3->forward(y)), blk.gamma3));
  y = add(y, mul(blk.mlp->forward(blk.norm2->forward(y)), blk.gamma2));
  check_close(out, y, 1e-5f, 1e-4f);
}

TEST_CASE("XCiT: forward_features = the pipeline composed from the submodules") {
  ModelConfig c = tiny_config("sima");
  c.depth = 1;
  c.tokens_norm = false;
  XCiT m(c);
  Generator g(31);
  for (auto& [name, p] : m.named_parameters()) {
    std::vector<float> v = to_vector(p);
    for (float& e : v) e += 0.2f * g.normal();
    std::copy(v.begin(), v.end(), p.data());
  }
  m.eval();
  Tensor images = randn({2, 3, 32, 48});
  Tensor feats = m.forward_features(images);
  // patch tokens (2, 4·6, D) + pos(4, 6), the block, then the class token in front.
  Tensor x = add(m.patch_embed->forward(images), m.pos_embed->forward(4, 6));
  x = m.blocks[0]->forward(x, 4, 6);
  x = cat({expand(m.cls_token, {2, 1, 32}), x}, 1);
  for (auto& blk : m.cls_attn_blocks) x = blk->forward(x);
  Tensor expected = slice(m.norm->forward(x), 1, 0, 1);  // (2, 1, D)
  check_close(feats, reshape(expected, {2, 32}), 1e-5f, 1e-4f);
  check_close(m.forward(images), m.heads(feats)[0], 1e-5f, 1e-4f);
}

TEST_CASE("XCiT: class-attention form follows the variant unless cls_attn_variant says") {
  CHECK(XCiT(tiny_config("xca")).cls_attn_blocks[1]->attn->options().variant == "softmax");
  CHECK(XCiT(tiny_config("sima")).cls_attn_blocks[1]->attn->options().variant == "sima");
  CHECK(XCiT(tiny_config("sima")).cls_attn_blocks[0]->attn->options().eps == 1e-6f);
  ModelConfig c = tiny_config("xca");
  c.cls_attn_variant = "sima";
  CHECK(XCiT(c).cls_attn_blocks[0]->attn->options().variant == "sima");
  c = tiny_config("sima");
  c.cls_attn_variant = "softmax";
  CHECK(XCiT(c).cls_attn_blocks[0]->attn->options().variant == "softmax");
}

TEST_CASE("XCiT: attention_layers are the blocks' self-attention, in order; exp counters work") {
  XCiT m(tiny_config("xca"));
  auto layers = m.attention_layers();
  REQUIRE(layers.size() == 2);
  for (size_t i = 0; i < layers.size(); ++i) {
    CHECK(layers[i] == m.blocks[i]->attn.get());
    CHECK(dynamic_cast<XCAttention*>(layers[i]) != nullptr);
    layers[i]->reset_exp_calls();
  }
  NoGradGuard ng;
  m.forward(randn({1, 3, 32, 32}));
  for (Attention* a : layers) CHECK(a->exp_calls() == 1 * 2 * 16 * 16);  // B·h·d², d = 16
}

// docs/models.md §3: in a SimA XCiT no attention layer evaluates exp() (the GELUs still do).
TEST_CASE("XCiT SimA: neither the trunk's attention nor the class attention evaluates exp()") {
  for (const std::string variant : {"sima", "xca"}) {
    CAPTURE(variant);
    XCiT m(tiny_config(variant));
    for (Attention* a : m.attention_layers()) a->reset_exp_calls();
    for (auto& b : m.cls_attn_blocks) b->attn->reset_exp_calls();
    NoGradGuard ng;
    m.forward(randn({1, 3, 32, 32}));
    int64_t trunk = 0, cls = 0;
    for (Attention* a : m.attention_layers()) trunk += a->exp_calls();
    for (auto& b : m.cls_attn_blocks) cls += b->attn->exp_calls();
    if (variant == "sima") {
      CHECK(trunk == 0);
      CHECK(cls == 0);
    } else {  // the control: XCA and softmax class attention do count (B·h·d² per block, B·h·T per CA)
      CHECK(trunk == 2 * (1 * 2 * 16 * 16));
      CHECK(cls == 2 * (1 * 2 * (1 + 16)));
    }
  }
}

TEST_CASE("XCiT: bad config values are errors naming the field and the allowed values") {
  auto throws_with = [](ModelConfig c, const char* what) {
    CAPTURE(what);
    CHECK_THROWS_WITH_AS(XCiT{c}, doctest::Contains(what), Error);
  };
  ModelConfig c = tiny_config();
  c.img_size = 36;
  throws_with(c, "img_size 36");
  c = tiny_config();
  c.num_heads = 3;
  throws_with(c, "num_heads 3");
  c = tiny_config();
  c.patch_size = 14;
  throws_with(c, "allowed: 16, 8, 4");
  c = tiny_config();
  c.patch_size = 16;
  c.embed_dim = 36;
  c.num_heads = 1;
  throws_with(c, "embed_dim 36");
  c = tiny_config();
  c.cls_attn_variant = "relu";
  throws_with(c, "allowed: softmax, sima");
  c = tiny_config();
  c.act = "tanh";
  throws_with(c, "allowed: gelu, relu, quick_gelu");
  c = tiny_config("reformer");
  throws_with(c, "attention variant 'reformer' is unknown (allowed: softmax, xca, sima,");
  c = tiny_config();
  c.drop_path_rate = 1.f;
  throws_with(c, "drop_path_rate");
  c = tiny_config();
  c.cls_attn_layers = 0;
  throws_with(c, "cls_attn_layers");
  c = tiny_config();
  c.attention.projections = false;
  throws_with(c, "projections");
  XCiT m(tiny_config());
  CHECK_THROWS_AS(m.forward(randn({1, 1, 32, 32})), Error);
}
