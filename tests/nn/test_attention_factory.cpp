// make_attention: every variant by name, single- and multi-head, shapes and
// gradients end to end; errors for unknown names and bad options; timm names of a
// small ViT built from the layers.
#include "testing.h"

#include "nn/attention/attention.h"
#include "nn/attention/variants.h"
#include "nn/attention/xca.h"
#include "nn/conv2d.h"
#include "nn/layers.h"
#include "nn/mlp.h"
#include "nn/normalization.h"

using namespace sima;
using namespace sima::testing;

// Every row of the variant table: a new variant is covered here without touching the test.
static const std::vector<std::string> kVariants = attention_variant_names();

TEST_CASE("every variant builds by name and runs forward and backward, h = 1 and h = 4") {
  for (const std::string& v : kVariants)
    for (int64_t heads : {1, 4}) {
      CAPTURE(v);
      CAPTURE(heads);
      AttentionOptions opt;
      opt.variant = v;
      opt.dim = 16;
      opt.num_heads = heads;
      if (v == "nystromformer") opt.with("num_landmarks", 4);  // <= N = 16 (the default 64 is for N >= 64)
      opt.num_tokens = 16;  // linformer's N
      auto attn = make_attention(opt);
      CHECK(attn->head_dim() == 16 / heads);
      Tensor x = randn_leaf({2, 16, 16}, 1);  // N = 16 tokens on a 4x4 grid
      Tensor y = attn->forward(x, 4, 4);
      CHECK(y.shape() == Shape{2, 16, 16});
      for (float f : to_vector(y)) REQUIRE(std::isfinite(f));
      y.backward(randn(y.shape()));
      CHECK(x.grad().defined());
      for (auto& [name_, p_] : attn->named_parameters()) {
        const auto& name = name_; const auto& p = p_;  // clang 14 cannot capture a structured binding
        CAPTURE(name);
        CHECK(p.grad().defined());
      }
    }
}

TEST_CASE("exp counts per image match the paper's #exp column, counted and by the row") {
  const int64_t B = 2, N = 16, C = 16, h = 2, d = C / h;
  auto count = [&](const std::string& v, const std::string& reweight = "none") {
    AttentionOptions opt;
    opt.variant = v;
    if (v == "cosformer") opt.with("reweight", reweight);
    opt.dim = C;
    opt.num_heads = h;
    if (v == "nystromformer") opt.with("num_landmarks", 4);
    opt.num_tokens = N;  // linformer, with proj_len k = N / 4
    auto attn = make_attention(opt);
    NoGradGuard ng;
    attn->forward(randn({B, N, C}), 4, 4);
    CHECK(attention_exp_calls(opt, B, N, 4, 4) == attn->exp_calls());  // the row's count, the same column
    return attn->exp_calls() / B;
  };
  CHECK(count("softmax") == h * N * N);
  CHECK(count("xca") == h * d * d);
  CHECK(count("sima") == 0);
  CHECK(count("relu") == 0);
  CHECK(count("cosformer") == 0);
  CHECK(count("cosformer", "cos1d") == 0);  // the re-weighting is sin/cos of token positions, no exp
  CHECK(count("cosformer", "cos2d") == 0);
  CHECK(count("linear_elu") == 2 * h * N * d);  // elu on q and on k
  CHECK(count("efficient") == 2 * h * N * d);   // softmax of q over d, of k over N
  CHECK(count("linformer") == h * N * (N / 4));  // N queries over k = N/4 projected keys
  const int64_t m = (4 / 2) * (4 / 2);         // bottleneck tokens for sr = 2
  CHECK(count("soft") == h * (m * m + m * N));
  const int64_t nf = 16;  // performer features: int(d·ln d) = int(8·ln 8) = int(16.6)
  CHECK(count("performer") == h * 2 * N * nf);
  const int64_t nl = 4;   // nystromformer landmarks
  CHECK(count("nystromformer") == h * (2 * N * nl + nl * nl));
}

TEST_CASE("bad variant names and options are clear errors") {
  AttentionOptions opt;
  opt.dim = 16;
  opt.num_heads = 4;
  opt.variant = "reformer";
  std::string names;
  for (auto& n : attention_variant_names()) names += (names.empty() ? "" : ", ") + n;
  CHECK_THROWS_WITH_AS(make_attention(opt), ("attention variant 'reformer' is unknown (allowed: " + names + ")").c_str(),
                       Error);
  opt.variant = "sima";
  CHECK_THROWS_AS(opt.with("norm", "l3"), Error);  // the row checks the value as it is set
  opt.own["norm"] = "l3";                          // set around the row: the factory checks it
  CHECK_THROWS_AS(make_attention(opt), Error);
  opt.with("norm", "l1");
  CHECK_THROWS_AS(opt.with("order", "sideways"), Error);
  opt.own["order"] = "sideways";
  CHECK_THROWS_AS(make_attention(opt), Error);
  opt.with("order", "auto");
  opt.num_heads = 3;
  CHECK_THROWS_WITH_AS(make_attention(opt), doctest::Contains("num_heads 3 does not divide dim 16"), Error);
  opt.num_heads = 4;
  opt.variant = "relu";
  opt.own = nlohmann::json::object();
  CHECK_THROWS_AS(opt.with("fn", "swish"), Error);
  opt.own["fn"] = "swish";
  CHECK_THROWS_AS(make_attention(opt), Error);
  opt.own = nlohmann::json::object();
  opt.variant = "soft";
  auto soft = make_attention(opt);
  CHECK_THROWS_AS(soft->forward(randn({1, 16, 16})), Error);  // SOFT needs the grid
  opt.variant = "softmax";
  CHECK_THROWS_AS(make_attention(opt)->forward(randn({1, 16, 8})), Error);  // wrong width
}

namespace {
// A two-block ViT assembled from nn/ layers, registered the way timm's VisionTransformer is.
struct Block : Module {
  explicit Block(const AttentionOptions& opt) : Module("Block") {
    norm1 = register_module("norm1", std::make_shared<LayerNorm>(opt.dim, 1e-6f));
    attn = register_module("attn", make_attention(opt));
    norm2 = register_module("norm2", std::make_shared<LayerNorm>(opt.dim, 1e-6f));
    mlp = register_module("mlp", std::make_shared<Mlp>(opt.dim, 4 * opt.dim));
  }
  Tensor forward(const Tensor& x) override {
    Tensor y = add(x, attn->forward(norm1->forward(x)));
    return add(y, mlp->forward(norm2->forward(y)));
  }
  std::shared_ptr<LayerNorm> norm1, norm2;
  std::shared_ptr<Attention> attn;
  std::shared_ptr<Mlp> mlp;
};
struct PatchEmbed : Module {
  PatchEmbed() : Module("PatchEmbed") { proj = register_module("proj", std::make_shared<Conv2d>(3, 8, 4, 4)); }
  std::shared_ptr<Conv2d> proj;
};
struct TinyViT : Module {
  explicit TinyViT(const std::string& variant) : Module("TinyViT") {
    AttentionOptions opt;
    opt.variant = variant;
    opt.dim = 8;
    opt.num_heads = 2;
    cls_token = register_parameter("cls_token", zeros({1, 1, 8}));
    pos_embed = register_parameter("pos_embed", zeros({1, 5, 8}));
    register_module("patch_embed", std::make_shared<PatchEmbed>());
    auto blocks = std::make_shared<Sequential>();
    for (int i = 0; i < 2; ++i) blocks->push_back(std::make_shared<Block>(opt));
    register_module("blocks", blocks);
    register_module("norm", std::make_shared<LayerNorm>(8, 1e-6f));
    register_module("head", std::make_shared<Linear>(8, 10));
  }
  Tensor cls_token, pos_embed;
};
}  // namespace

TEST_CASE("a small ViT's named_parameters are timm's names") {
  std::vector<std::string> expected = {"cls_token", "pos_embed", "patch_embed.proj.weight", "patch_embed.proj.bias"};
  for (int i = 0; i < 2; ++i)
    for (const char* n : {"norm1.weight", "norm1.bias", "attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight",
                          "attn.proj.bias", "norm2.weight", "norm2.bias", "mlp.fc1.weight", "mlp.fc1.bias",
                          "mlp.fc2.weight", "mlp.fc2.bias"})
      expected.push_back("blocks." + std::to_string(i) + "." + n);
  for (const char* n : {"norm.weight", "norm.bias", "head.weight", "head.bias"}) expected.push_back(n);
  std::vector<std::string> got;
  TinyViT vit("sima");
  for (auto& [n, t] : vit.named_parameters()) got.push_back(n);
  CHECK(got == expected);
  // XCiT's attention adds its per-head temperature as blocks.<i>.attn.temperature (shape (h, 1, 1)).
  TinyViT xcit("xca");
  auto sd = xcit.state_dict();
  REQUIRE(sd.count("blocks.1.attn.temperature"));
  CHECK(sd.at("blocks.1.attn.temperature").shape() == Shape{2, 1, 1});
}

TEST_CASE("projections = false: no qkv/proj parameters, core usable, forward a clear error") {
  for (const std::string& v : kVariants) {
    CAPTURE(v);
    AttentionOptions opt;
    opt.variant = v;
    opt.dim = 16;
    opt.num_heads = 2;
    opt.num_tokens = 16;  // linformer's N
    opt.projections = false;
    if (v == "nystromformer") opt.with("num_landmarks", 4);
    auto attn = make_attention(opt);
    CHECK_FALSE(attn->qkv);
    for (auto& [n_, t_] : attn->named_parameters()) {
      const auto& n = n_; const auto& t = t_;  // clang 14 cannot capture a structured binding
      CAPTURE(n);
      CHECK(n.rfind("qkv", 0) != 0);
      CHECK(n.rfind("proj", 0) != 0);
    }
    const bool shares_qk = attention_variant(v).traits.shares_qk;  // the core takes k = q
    Tensor q = randn({1, 2, 16, 8}), k = shares_qk ? q : randn({1, 2, 16, 8}), val = randn({1, 2, 16, 8});
    CHECK(attn->core(q, k, val, 4, 4).shape() == Shape{1, 2, 16, 8});
    CHECK_THROWS_WITH_AS(attn->forward(randn({1, 16, 16}), 4, 4), doctest::Contains("built without projections"),
                         Error);
  }
}

TEST_CASE("SOFT: tokens before the grid (a class token) attend and are attended to") {
  AttentionOptions opt;
  opt.variant = "soft";
  opt.dim = 16;
  opt.num_heads = 2;
  auto attn = make_attention(opt);
  Tensor x = randn_leaf({2, 17, 16}, 3);  // class token + 4x4 grid
  Tensor y = attn->forward(x, 4, 4);
  CHECK(y.shape() == Shape{2, 17, 16});
  // The class token's output depends on the grid tokens.
  Tensor g = zeros({2, 17, 16});
  g.at({0, 0, 0}) = 1.f;  // d y[0, cls, 0] / d x
  attn->forward(x, 4, 4).backward(g);
  float grid_grad = 0.f;
  for (int64_t t = 1; t < 17; ++t)
    for (int64_t c = 0; c < 16; ++c) grid_grad += std::fabs(x.grad().at({0, t, c}));
  CHECK(grid_grad > 0.f);
  CHECK_THROWS_AS(attn->forward(randn({1, 15, 16}), 4, 4), Error);  // fewer tokens than the grid
}
