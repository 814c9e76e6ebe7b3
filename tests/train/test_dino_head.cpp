// DINOHead: DINO's state-dict names and shapes, init, the forward against the same
// computation written out by hand, the frozen weight_g, a module gradcheck, errors.
#include <cmath>

#include "nn/dino_head.h"
#include "nn/layers.h"
#include "nn/linear.h"
#include "testing.h"
#include "train/optim/optim.h"

using namespace sima;
using namespace sima::testing;

namespace {

DINOHeadOptions small_head(bool norm_last_layer = true, int64_t nlayers = 3) {
  return {.in_dim = 6, .out_dim = 11, .hidden_dim = 8, .bottleneck_dim = 5, .nlayers = nlayers,
          .norm_last_layer = norm_last_layer};
}

}  // namespace

TEST_CASE("DINOHead: parameter names and shapes as DINO's state dict") {
  DINOHead head(small_head());
  std::vector<std::pair<std::string, Shape>> expected = {
      {"mlp.0.weight", {8, 6}}, {"mlp.0.bias", {8}},  {"mlp.2.weight", {8, 8}},
      {"mlp.2.bias", {8}},      {"mlp.4.weight", {5, 8}}, {"mlp.4.bias", {5}},
      {"last_layer.weight_g", {11, 1}}, {"last_layer.weight_v", {11, 5}}};
  auto params = head.named_parameters();
  REQUIRE(params.size() == expected.size());
  for (size_t i = 0; i < params.size(); ++i) {
    CHECK(params[i].first == expected[i].first);
    CHECK(params[i].second.shape() == expected[i].second);
  }
  DINOHead one(small_head(true, 1));
  auto p1 = one.named_parameters();
  REQUIRE(p1.size() == 4);
  CHECK(p1[0].first == "mlp.weight");
  CHECK(p1[0].second.shape() == Shape{5, 6});
  DINOHead four(small_head(true, 4));  // two hidden Linear+GELU pairs: mlp.0, .2, .4, .6
  CHECK(four.named_parameters()[6].first == "mlp.6.weight");
}

TEST_CASE("DINOHead: init (trunc_normal .02, zero biases, g = 1) and the frozen weight_g") {
  manual_seed(5);
  DINOHead head({.in_dim = 32, .out_dim = 11, .hidden_dim = 64, .bottleneck_dim = 5});
  double ss = 0.0;
  int64_t n_w = 0;
  for (auto& [name, p] : head.named_parameters()) {
    CAPTURE(name);
    if (name.find(".bias") != std::string::npos)
      for (float v : to_vector(p)) CHECK(v == 0.f);
    if (name.rfind("mlp.", 0) == 0 && name.find(".weight") != std::string::npos)
      for (float v : to_vector(p)) {
        ss += double(v) * v;
        ++n_w;
      }
  }
  // trunc_normal(std .02) with timm's absolute bounds ±2 (nothing cut): the sample std of
  // 6464 draws is .02 within a few percent.
  REQUIRE(n_w == 32 * 64 + 64 * 64 + 64 * 5);
  CHECK(std::sqrt(ss / double(n_w)) == doctest::Approx(0.02).epsilon(0.05));
  for (float v : to_vector(head.last_layer->weight_g)) CHECK(v == 1.f);
  // weight_v keeps nn.Linear's default U(±1/√in): not the .02 init.
  float vmax = 0.f;
  for (float v : to_vector(head.last_layer->weight_v)) vmax = std::max(vmax, std::fabs(v));
  CHECK(vmax <= 1.f / std::sqrt(5.f) + 1e-6f);
  CHECK(vmax > 0.2f);
  CHECK_FALSE(head.last_layer->weight_g.requires_grad());
  CHECK(DINOHead(small_head(false)).last_layer->weight_g.requires_grad());
  // The optimizer's groups leave the frozen g out (as DINO's get_params_groups skips it).
  auto groups = param_groups_no_decay(head.named_parameters(), {});
  size_t n = 0;
  for (auto& g : groups)
    for (auto& [name, p] : g.params) {
      CHECK(name != "last_layer.weight_g");
      ++n;
    }
  CHECK(n == 7);
}

TEST_CASE("DINOHead: forward = mlp, ℓ2-normalise, unit-norm prototypes (written out in double)") {
  manual_seed(6);
  DINOHead head(small_head());
  randomize_parameters(head, 7, 0.5f);
  for (int64_t r = 0; r < 11; ++r) head.last_layer->weight_g.data()[r] = 1.f;  // DINO keeps g at 1
  Tensor x = randn_leaf({3, 6}, 8, false);
  Tensor y = head.forward(x);
  REQUIRE(y.shape() == Shape{3, 11});

  auto lin = [](const std::vector<double>& in, const Tensor& w, const Tensor& b) {
    std::vector<double> out(size_t(w.size(0)));
    for (int64_t o = 0; o < w.size(0); ++o) {
      double s = b.defined() ? b.data()[o] : 0.0;
      for (int64_t i = 0; i < w.size(1); ++i) s += double(w.at({o, i})) * in[size_t(i)];
      out[size_t(o)] = s;
    }
    return out;
  };
  auto gelu = [](std::vector<double> v) {
    for (double& a : v) a = 0.5 * a * (1.0 + std::erf(a / std::sqrt(2.0)));
    return v;
  };
  auto& seq = dynamic_cast<Sequential&>(*head.mlp);
  auto L = [&](int i) { return std::dynamic_pointer_cast<Linear>(seq.named_children()[size_t(i)].second); };
  // W = v / ‖v‖ per row (g = 1)
  Tensor v = head.last_layer->weight_v;
  for (int64_t b = 0; b < 3; ++b) {
    std::vector<double> in(6);
    for (int64_t i = 0; i < 6; ++i) in[size_t(i)] = x.at({b, i});
    auto h = gelu(lin(gelu(lin(in, L(0)->weight, L(0)->bias)), L(2)->weight, L(2)->bias));
    auto z = lin(h, L(4)->weight, L(4)->bias);
    double nz = 0;
    for (double a : z) nz += a * a;
    for (double& a : z) a /= std::sqrt(nz);
    for (int64_t k = 0; k < 11; ++k) {
      double nv = 0, dot = 0;
      for (int64_t i = 0; i < 5; ++i) {
        nv += double(v.at({k, i})) * v.at({k, i});
        dot += double(v.at({k, i})) * z[size_t(i)];
      }
      const double expected = dot / std::sqrt(nv);
      CHECK(y.at({b, k}) == doctest::Approx(expected).epsilon(1e-4));
      CHECK(std::fabs(y.at({b, k})) <= 1.f + 1e-5f);  // a cosine similarity
    }
  }
}

TEST_CASE("DINOHead: gradcheck of the input and every parameter (g trained)") {
  manual_seed(9);
  DINOHead head({.in_dim = 4, .out_dim = 6, .hidden_dim = 5, .bottleneck_dim = 3, .nlayers = 3,
                 .norm_last_layer = false});
  randomize_parameters(head, 10, 0.6f);
  Tensor x = randn_leaf({2, 4}, 11);
  GradcheckOptions opt;
  opt.eps = 3e-3;
  opt.atol = 3e-3;
  opt.rtol = 3e-2;
  gradcheck_module(head, x, opt);
}

TEST_CASE("DINOHead: the frozen g gets no gradient, v and the mlp do") {
  DINOHead head(small_head());
  Tensor x = randn_leaf({4, 6}, 12, false);
  sum(head.forward(x)).backward();
  CHECK_FALSE(head.last_layer->weight_g.grad().defined());
  CHECK(head.last_layer->weight_v.grad().defined());
  for (auto& [name, p] : head.named_parameters())
    if (name.rfind("mlp.", 0) == 0) CHECK(p.grad().defined());
}

TEST_CASE("DINOHead: errors") {
  CHECK(error_message([] { DINOHead h(small_head(true, 0)); }) == "DINOHead: nlayers must be >= 1, got 0");
  CHECK(error_message([] {
          DINOHead h({.in_dim = 4, .out_dim = 0});
        }).find("must be positive") != std::string::npos);
  DINOHead head(small_head());
  CHECK(error_message([&] { head.forward(ones({2, 5})); }) == "DINOHead: input (2, 5) must be (N, 6)");
}
