// DeiT: exact timm parameter counts, names, distillation heads, drop-path schedule,
// LayerScale, position-embedding resizing, every attention variant, a whole-model gradcheck.
#include "testing.h"

#include <set>

#include "models/deit.h"
#include "models/registry.h"
#include "nn/attention/variants.h"

using namespace sima;
using namespace sima::testing;

namespace {
ModelConfig tiny_deit(const std::string& variant = "softmax") {
  ModelConfig c;
  c.arch = "deit";
  c.img_size = 16;
  c.patch_size = 4;
  c.in_chans = 3;
  c.num_classes = 5;
  c.embed_dim = 16;
  c.depth = 2;
  c.num_heads = 2;
  c.attention.variant = variant;
  if (variant == "nystromformer") c.attention.with("num_landmarks", 4);  // <= the 17 tokens
  return c;
}
}  // namespace

TEST_CASE("DeiT-Ti and DeiT-S: timm's exact parameter counts, SimA twins equal") {
  // DeiT-Ti (224, patch 16, D 192, 12 blocks, 1000 classes):
  //   patch_embed 16·16·3·192 + 192 = 147,648; cls 192; pos_embed 197·192 = 37,824
  //   block: norm1 384 + qkv 192·576+576 = 111,168 + proj 192·192+192 = 37,056 + norm2 384
  //          + fc1 192·768+768 = 148,224 + fc2 768·192+192 = 147,648  = 444,864;  ×12 = 5,338,368
  //   norm 384; head 192·1000+1000 = 193,000            total 5,717,416
  // DeiT-S (D 384): 295,296 + 384 + 75,648 + 12·1,774,464 + 768 + 385,000 = 22,050,664
  for (auto [name, count] : {std::pair<std::string, int64_t>{"deit_tiny_patch16_224", 5717416},
                             {"deit_small_patch16_224", 22050664}}) {
    CAPTURE(name);
    CHECK(create_model(name)->num_parameters() == count);
    CHECK(create_model(name + "_sima")->num_parameters() == count);
  }
}

TEST_CASE("DeiT: timm names, distillation token and head, LayerScale names") {
  ModelConfig c = tiny_deit();
  c.distilled = true;
  c.layer_scale_init = 1e-5f;
  DeiT m(c);
  std::set<std::string> names;
  for (auto& [n, t] : m.named_parameters()) names.insert(n);
  for (const char* n : {"cls_token", "dist_token", "pos_embed", "patch_embed.proj.weight", "patch_embed.proj.bias",
                        "blocks.1.norm1.weight", "blocks.1.attn.qkv.weight", "blocks.1.attn.proj.bias",
                        "blocks.1.ls1.gamma", "blocks.1.norm2.bias", "blocks.1.mlp.fc1.weight",
                        "blocks.1.mlp.fc2.bias", "blocks.1.ls2.gamma", "norm.weight", "head.weight", "head_dist.bias"}) {
    CAPTURE(n);
    CHECK(names.count(n) == 1);
  }
  CHECK(m.pos_embed.shape() == Shape{1, 16 + 2, 16});
  CHECK(m.blocks[0]->ls1->type_name() == "LayerScale");
  CHECK(m.state_dict().at("blocks.0.ls1.gamma").data()[0] == doctest::Approx(1e-5f));
  // Training: two heads; eval/forward: their mean.
  Tensor x = randn({2, 3, 16, 16});
  std::vector<Tensor> h = m.forward_heads(x);
  REQUIRE(h.size() == 2);
  m.eval();
  h = m.forward_heads(x);
  Tensor mean_ = mul(add(h[0], h[1]), 0.5f);
  CHECK(max_abs_diff(m.forward(x), mean_) < 1e-6f);
  CHECK(max_abs_diff(h[0], h[1]) > 0.f);  // the heads really differ
}

TEST_CASE("DeiT: drop path grows linearly over the blocks; inits as timm") {
  ModelConfig c = tiny_deit();
  c.depth = 5;
  c.drop_path_rate = 0.2f;
  DeiT m(c);
  for (int i = 0; i < 5; ++i) CHECK(m.blocks[i]->drop_path1->p == doctest::Approx(0.05f * i));
  // Linear weights trunc_normal(.02), biases 0; LayerNorm 1 / 0.
  float wmax = 0;
  for (float v : to_vector(m.blocks[0]->attn->qkv->weight)) wmax = std::max(wmax, std::fabs(v));
  CHECK(wmax < 0.12f);  // 6 std
  for (float v : to_vector(m.blocks[0]->attn->qkv->bias)) CHECK(v == 0.f);
  for (float v : to_vector(m.head->bias)) CHECK(v == 0.f);
  for (float v : to_vector(m.norm->weight)) CHECK(v == 1.f);
}

TEST_CASE("DeiT: another input size resizes the position embedding (bicubic)") {
  DeiT m(tiny_deit());
  Tensor p = m.position_embedding(4, 4);
  CHECK(p.impl() == m.pos_embed.impl());  // trained grid: unchanged
  Tensor q = m.position_embedding(6, 5);
  CHECK(q.shape() == Shape{1, 1 + 30, 16});
  CHECK(q.at({0, 0, 3}) == m.pos_embed.at({0, 0, 3}));  // the class token's part is kept
  CHECK(m.forward(randn({2, 3, 24, 20})).shape() == Shape{2, 5});
  // Upsampling a constant grid gives the same constant.
  for (int64_t t = 1; t < 17; ++t)
    for (int64_t c = 0; c < 16; ++c) m.pos_embed.at({0, t, c}) = 0.25f * c;
  Tensor r = m.position_embedding(8, 8);
  for (int64_t t = 1; t < 65; ++t) CHECK(r.at({0, t, 5}) == doctest::Approx(1.25f));
}

TEST_CASE("DeiT: every attention variant trains (finite, gradient on every parameter)") {
  for (const std::string& v : attention_variant_names()) {  // every row of the variant table
    CAPTURE(v);
    ModelConfig c = tiny_deit(v);
    c.act = v == "sima" ? "relu" : "gelu";
    DeiT m(c);
    Tensor x = randn({2, 3, 16, 16});
    Tensor loss = cross_entropy(m.forward(x), {1, 3});
    REQUIRE(std::isfinite(loss.item()));
    loss.backward();
    for (auto& [n, p] : m.named_parameters()) {
      CAPTURE(n);
      REQUIRE(p.grad().defined());
      CHECK(all_finite(p.grad()));
    }
  }
}

TEST_CASE("DeiT with SOFT's softmax_max_tokens at or above its tokens is the softmax DeiT, weights and logits") {
  // tiny_deit: 4x4 patches + class token = 17 tokens; the official SOFT vision model runs
  // softmax in its last stage, a SOFT layer of at most softmax_max_tokens tokens does here.
  const nlohmann::json soft_official = {{"type", "soft"}, {"softmax_max_tokens", 17}};
  ModelConfig c = tiny_deit("soft");
  c.attention = attention_options_from_json(soft_official, c.attention);
  manual_seed(3);
  DeiT official(c);
  manual_seed(3);
  DeiT softmax(tiny_deit("softmax"));
  CHECK(official.num_parameters() == softmax.num_parameters());
  const auto a = official.named_parameters(), b = softmax.named_parameters();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(a[i].first);
    CHECK(a[i].first == b[i].first);
    CHECK(max_abs_diff(a[i].second, b[i].second) == 0.f);
  }
  official.eval(), softmax.eval();
  const Tensor x = randn({2, 3, 16, 16});
  CHECK(max_abs_diff(official.forward(x), softmax.forward(x)) == 0.f);
  // One token more than the layer has: every block stays SOFT (q and k share one projection).
  c.attention = attention_options_from_json({{"softmax_max_tokens", 16}}, c.attention);
  CHECK(DeiT(c).blocks[0]->attn->qkv->weight.size(0) == 2 * 16);
  CHECK(official.blocks[0]->attn->qkv->weight.size(0) == 3 * 16);
}

TEST_CASE("DeiT: conv_stem patch embedding option") {
  ModelConfig c = tiny_deit();
  c.patch_embed = "conv_stem";
  DeiT m(c);
  CHECK(m.state_dict().count("patch_embed.proj.0.0.weight") == 1);
  CHECK(m.forward(randn({2, 3, 16, 16})).shape() == Shape{2, 5});
  c.patch_embed = "linear";
  CHECK_THROWS_AS(DeiT{c}, Error);
}

TEST_CASE("DeiT: gradcheck of a whole tiny model w.r.t. input and every parameter") {
  ModelConfig c = tiny_deit("sima");
  c.img_size = 8;
  c.embed_dim = 8;
  c.depth = 1;
  c.num_classes = 3;
  DeiT m(c);
  randomize_parameters(m, 5, 0.3f);
  GradcheckOptions opt;
  opt.eps = 1e-2;
  opt.atol = 5e-3;
  opt.rtol = 5e-2;
  gradcheck_module(m, uniform_leaf({2, 3, 8, 8}, 0.2f, 1.f, 6), opt);
}

TEST_CASE("DeiT: bad configs are clear errors") {
  ModelConfig c = tiny_deit();
  c.img_size = 18;
  CHECK_THROWS_WITH_AS(DeiT{c}, doctest::Contains("img_size 18 must be a positive multiple of patch_size 4"), Error);
  c = tiny_deit();
  c.num_heads = 3;
  CHECK_THROWS_WITH_AS(DeiT{c}, doctest::Contains("num_heads 3 does not divide dim 16"), Error);
  DeiT m(tiny_deit());
  CHECK_THROWS_AS(m.forward(randn({2, 1, 16, 16})), Error);
}
