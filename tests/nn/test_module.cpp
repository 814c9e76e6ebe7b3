// Module system: registration, dotted names, train/eval, state_dict round trips and
// the single error that lists every mismatch; initialisers.
#include "testing.h"

#include <cmath>

#include "nn/init.h"
#include "nn/layers.h"
#include "nn/linear.h"
#include "nn/mlp.h"
#include "nn/normalization.h"

using namespace sima;
using namespace sima::testing;

namespace {
struct Block : Module {
  Block() : Module("Block") {
    norm1 = register_module("norm1", std::make_shared<LayerNorm>(8));
    mlp = register_module("mlp", std::make_shared<Mlp>(8, 16));
  }
  Tensor forward(const Tensor& x) override { return add(x, mlp->forward(norm1->forward(x))); }
  std::shared_ptr<LayerNorm> norm1;
  std::shared_ptr<Mlp> mlp;
};

struct Tiny : Module {
  Tiny() : Module("Tiny") {
    cls_token = register_parameter("cls_token", zeros({1, 1, 8}));
    auto seq = std::make_shared<Sequential>();
    seq->push_back(std::make_shared<Block>()).push_back(std::make_shared<Block>());
    blocks = register_module("blocks", seq);
    bn = register_module("bn", std::make_shared<BatchNorm2d>(8));
    head = register_module("head", std::make_shared<Linear>(8, 3));
  }
  Tensor cls_token;
  std::shared_ptr<Sequential> blocks;
  std::shared_ptr<BatchNorm2d> bn;
  std::shared_ptr<Linear> head;
};

std::vector<std::string> names(const std::vector<std::pair<std::string, Tensor>>& v) {
  std::vector<std::string> out;
  for (auto& [n, t] : v) out.push_back(n);
  return out;
}
}  // namespace

TEST_CASE("named_parameters: dotted timm-style names in registration order") {
  Tiny m;
  std::vector<std::string> expected = {
      "cls_token",
      "blocks.0.norm1.weight", "blocks.0.norm1.bias",
      "blocks.0.mlp.fc1.weight", "blocks.0.mlp.fc1.bias", "blocks.0.mlp.fc2.weight", "blocks.0.mlp.fc2.bias",
      "blocks.1.norm1.weight", "blocks.1.norm1.bias",
      "blocks.1.mlp.fc1.weight", "blocks.1.mlp.fc1.bias", "blocks.1.mlp.fc2.weight", "blocks.1.mlp.fc2.bias",
      "bn.weight", "bn.bias", "head.weight", "head.bias"};
  CHECK(names(m.named_parameters()) == expected);
  CHECK(names(m.named_buffers()) == std::vector<std::string>{"bn.running_mean", "bn.running_var", "bn.num_batches_tracked"});
  // 8 + 2·(16 + 8·16+16 + 16·8+8) + 16 + 8·3+3
  CHECK(m.num_parameters() == 8 + 2 * (16 + 144 + 136) + 16 + 27);
  CHECK(m.parameters().size() == expected.size());
  for (auto& t : m.parameters()) CHECK(t.requires_grad());
  for (auto& [n, t] : m.named_buffers()) CHECK_FALSE(t.requires_grad());
  auto mods = m.named_modules();
  CHECK(mods[0].first == "");
  // Tiny; blocks, bn, head; per block: itself, norm1, mlp, and mlp.{fc1, act, drop1, fc2, drop2}
  CHECK(mods.size() == 1 + 3 + 2 * (1 + 2 + 5));
  CHECK(mods[4].first == "blocks.0");
}

TEST_CASE("train / eval propagate to every child; zero_grad clears every gradient") {
  Tiny m;
  m.eval();
  for (auto& [n, mod] : m.named_modules()) CHECK_FALSE(mod->is_training());
  m.train();
  for (auto& [n, mod] : m.named_modules()) CHECK(mod->is_training());
  Tensor x = randn({2, 8});
  sum(m.head->forward(m.blocks->forward(x))).backward();
  CHECK(m.head->weight.grad().defined());
  m.zero_grad();
  for (auto& t : m.parameters()) CHECK_FALSE(t.grad().defined());
}

TEST_CASE("state_dict round trip copies values into the existing tensors") {
  manual_seed(1);
  Tiny a;
  manual_seed(2);
  Tiny b;
  Tensor alias = b.head->weight;  // e.g. held by an optimizer
  CHECK(max_abs_diff(a.head->weight, b.head->weight) > 0.f);
  a.bn->running_mean.data()[3] = 7.f;
  b.load_state_dict(a.state_dict());
  CHECK(max_abs_diff(a.head->weight, alias) == 0.f);
  CHECK(b.bn->running_mean.data()[3] == 7.f);
  for (auto& [n, t] : a.state_dict()) CHECK(max_abs_diff(t, b.state_dict().at(n)) == 0.f);
  CHECK(a.state_dict().size() == 20);
}

TEST_CASE("load_state_dict reports every missing, unexpected and mis-shaped name in one error") {
  Tiny m;
  StateDict sd = m.state_dict();
  sd.erase("head.bias");
  sd.erase("bn.running_var");
  sd["head.extra"] = zeros({2});
  sd["blocks.0.norm1.weight"] = zeros({9});
  Tensor before = m.head->weight.clone();
  for (auto& [n, t] : sd) if (n == "head.weight") sd[n] = full(t.shape(), 5.f);
  try {
    m.load_state_dict(sd);
    FAIL("no error");
  } catch (const Error& e) {
    std::string msg = e.what();
    CHECK(msg.find("missing (2)") != std::string::npos);
    CHECK(msg.find("head.bias") != std::string::npos);
    CHECK(msg.find("bn.running_var") != std::string::npos);
    CHECK(msg.find("unexpected (1)") != std::string::npos);
    CHECK(msg.find("head.extra") != std::string::npos);
    CHECK(msg.find("blocks.0.norm1.weight: checkpoint (9), model (8)") != std::string::npos);
  }
  CHECK(max_abs_diff(m.head->weight, before) == 0.f);  // nothing changed
}

TEST_CASE("registration errors") {
  Module m("M");
  m.register_parameter("w", zeros({2}));
  CHECK_THROWS_WITH_AS(m.register_parameter("w", zeros({2})), "M: parameter 'w' registered twice", Error);
  CHECK_THROWS_AS(m.register_parameter("a.b", zeros({2})), Error);
  CHECK_THROWS_AS(m.register_buffer("", zeros({2})), Error);
  CHECK_THROWS_AS(m.register_module("c", std::shared_ptr<Module>()), Error);
  CHECK_THROWS_WITH_AS(m.forward(zeros({1})), "M: forward(x) is not available for this module", Error);
  CHECK_THROWS_WITH_AS(make_activation("swish"), "activation 'swish' is unknown (allowed: gelu, quick_gelu, relu)",
                       Error);
}

TEST_CASE("initialisers: trunc_normal bounds and moments, kaiming and default bias bounds") {
  Generator g(3);
  Tensor t = empty({200000});
  trunc_normal_(t, 1.f, 0.f, -1.f, 1.5f, g);
  double s = 0, s2 = 0;
  float lo = 10, hi = -10;
  for (float v : to_vector(t)) s += v, s2 += double(v) * v, lo = std::min(lo, v), hi = std::max(hi, v);
  CHECK(lo >= -1.f);
  CHECK(hi <= 1.5f);
  // Truncated N(0,1) on [-1, 1.5]: mean (φ(-1) - φ(1.5)) / (Φ(1.5) - Φ(-1)) = 0.1129
  double Z = 0.5 * (std::erf(1.5 / std::sqrt(2.0)) - std::erf(-1 / std::sqrt(2.0)));
  double phi = [](double x) { return std::exp(-x * x / 2) / std::sqrt(2 * M_PI); }(-1.0) -
               std::exp(-1.5 * 1.5 / 2) / std::sqrt(2 * M_PI);
  CHECK(s / t.numel() == doctest::Approx(phi / Z).epsilon(0.03));
  // std .02 with the default ±2: effectively untruncated.
  Tensor w = empty({100000});
  trunc_normal_(w, 0.02f, 0.f, -2.f, 2.f, g);
  double v2 = 0;
  for (float v : to_vector(w)) v2 += double(v) * v;
  CHECK(std::sqrt(v2 / w.numel()) == doctest::Approx(0.02).epsilon(0.02));
  CHECK_THROWS_AS(trunc_normal_(w, 1.f, 0.f, 50.f, 60.f, g), Error);

  Linear lin(50, 30);
  float bound = 1.f / std::sqrt(50.f);
  float wmax = 0, bmax = 0;
  for (float v : to_vector(lin.weight)) wmax = std::max(wmax, std::fabs(v));
  for (float v : to_vector(lin.bias)) bmax = std::max(bmax, std::fabs(v));
  CHECK(wmax <= bound);
  CHECK(wmax > 0.9f * bound);  // uniform over the whole range
  CHECK(bmax <= bound);
  CHECK(fan_in(empty({8, 3, 5, 5})) == 75);
}
