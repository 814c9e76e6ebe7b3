// fused_mlp (core/ops/fused_mlp.h): the same function as linear -> act -> linear, with a
// backward that recomputes the activation; gradchecked; and the Mlp module on both paths.
#include "testing.h"

#include "core/allocator.h"
#include "nn/mlp.h"

using namespace sima;
using namespace sima::testing;

namespace {
const std::vector<std::pair<MlpActivation, std::string>> kActs = {
    {MlpActivation::Gelu, "gelu"}, {MlpActivation::QuickGelu, "quick_gelu"}, {MlpActivation::Relu, "relu"}};

Tensor act_by_name(const std::string& name, const Tensor& h) {
  if (name == "gelu") return gelu(h);
  if (name == "quick_gelu") return quick_gelu(h);
  return relu(h);
}
}  // namespace

TEST_CASE("fused_mlp == linear(act(linear(x, w1, b1)), w2, b2): values and all five gradients") {
  // x (2, 5, 6) -> hidden 10 -> out 4
  Tensor x = randn_leaf({2, 5, 6}, 1), w1 = randn_leaf({10, 6}, 2), b1 = randn_leaf({10}, 3),
         w2 = randn_leaf({4, 10}, 4), b2 = randn_leaf({4}, 5);
  for (auto& [act_, name_] : kActs) {
    const auto& act = act_; const auto& name = name_;  // clang 14 cannot capture a structured binding
    CAPTURE(name);
    check_same([act = act](auto& v) { return fused_mlp(v[0], v[1], v[2], v[3], v[4], act); },
               [name = name](auto& v) { return linear(act_by_name(name, linear(v[0], v[1], v[2])), v[3], v[4]); },
               {x, w1, b1, w2, b2});
  }
}

TEST_CASE("fused_mlp: finite-difference gradients of x, w1, b1, w2, b2") {
  for (auto& [act_, name_] : kActs) {
    const auto& act = act_; const auto& name = name_;  // clang 14 cannot capture a structured binding
    CAPTURE(name);
    // relu has a kink at 0: keep the hidden pre-activations away from it by a large b1.
    Tensor x = randn_leaf({3, 4}, 11), w1 = mul(randn_leaf({5, 4}, 12), 0.3f).detach().requires_grad_(),
           b1 = away_from_zero_leaf({5}, 1.f, 2.f, 13), w2 = randn_leaf({3, 5}, 14), b2 = randn_leaf({3}, 15);
    auto r = gradcheck([act = act](const std::vector<Tensor>& v) { return fused_mlp(v[0], v[1], v[2], v[3], v[4], act); },
                       {x, w1, b1, w2, b2});
    INFO(r.message);
    CHECK(r.ok);
    CHECK(r.checked == 12 + 20 + 5 + 15 + 3);
  }
}

TEST_CASE("fused_mlp: only the inputs that require grad get one; no-grad mode gives the same values") {
  Tensor x = randn_leaf({7, 6}, 21, false), w1 = randn_leaf({12, 6}, 22), b1 = randn_leaf({12}, 23, false),
         w2 = randn_leaf({6, 12}, 24, false), b2 = randn_leaf({6}, 25);
  Tensor y = fused_mlp(x, w1, b1, w2, b2, MlpActivation::Gelu);
  sum(y).backward();
  CHECK(w1.grad().defined());
  CHECK(b2.grad().defined());
  CHECK_FALSE(x.grad().defined());
  CHECK_FALSE(b1.grad().defined());
  CHECK_FALSE(w2.grad().defined());
  Tensor y_ng;
  {
    NoGradGuard ng;
    y_ng = fused_mlp(x, w1, b1, w2, b2, MlpActivation::Gelu);
  }
  CHECK(max_abs_diff(y, y_ng) == 0.f);
  CHECK_FALSE(y_ng.requires_grad());
}

TEST_CASE("fused_mlp keeps one hidden tensor for backward, the composition two") {
  const int64_t R = 256, C = 32, H = 128;
  Tensor x = randn_leaf({R, C}, 31), w1 = randn_leaf({H, C}, 32), b1 = randn_leaf({H}, 33),
         w2 = randn_leaf({C, H}, 34), b2 = randn_leaf({C}, 35);
  auto held_after_forward = [&](bool fused) {
    const int64_t before = allocator_stats().bytes_in_use;
    Tensor y = fused ? fused_mlp(x, w1, b1, w2, b2, MlpActivation::Gelu) : linear(gelu(linear(x, w1, b1)), w2, b2);
    return allocator_stats().bytes_in_use - before;
  };
  // Both hold y (R×C) while the graph is alive; the hidden tensors are R×H each.
  const int64_t hidden = int64_t(size_class(R * H * sizeof(float)));
  const int64_t fused = held_after_forward(true), composed = held_after_forward(false);
  CHECK(composed - fused == hidden);
}

TEST_CASE("fused_mlp: shapes that do not chain are errors naming them") {
  Tensor x = randn({2, 6}), w1 = randn({10, 6}), b1 = randn({10}), w2 = randn({4, 10}), b2 = randn({4});
  CHECK(error_message([&] { fused_mlp(x, w1, b1, randn({4, 9}), b2, MlpActivation::Gelu); })
            .find("do not chain") != std::string::npos);
  CHECK(error_message([&] { fused_mlp(randn({2, 5}), w1, b1, w2, b2, MlpActivation::Relu); })
            .find("do not chain") != std::string::npos);
  CHECK(error_message([&] { fused_mlp(x, w1, Tensor(), w2, b2, MlpActivation::Relu); })
            .find("undefined") != std::string::npos);
  MlpActivation a;
  CHECK(parse_mlp_activation("quick_gelu", &a));
  CHECK(a == MlpActivation::QuickGelu);
  CHECK_FALSE(parse_mlp_activation("swish", &a));
}

TEST_CASE("Mlp: the fused path and the module-by-module path agree, for every activation") {
  for (auto& [act_, name_] : kActs) {
    const auto& act = act_; const auto& name = name_;  // clang 14 cannot capture a structured binding
    CAPTURE(name);
    Mlp m(8, 16, 8, name);
    randomize_parameters(m, 41);
    std::vector<Tensor> params;
    for (auto& [n, p] : m.named_parameters()) params.push_back(p);
    Tensor x = randn_leaf({2, 3, 8}, 42);
    check_same(
        [&](auto& v) {
          m.fused = true;
          return m.forward(v[0]);
        },
        [&](auto& v) {
          m.fused = false;
          return m.forward(v[0]);
        },
        {x}, {}, params);
  }
}
