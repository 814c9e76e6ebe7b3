// weight_norm: hand-computed values and gradients, the composition oracle
// g · v / sqrt(Σ v²), gradchecks (2-D and conv-shaped weights, frozen g or v), errors.
#include <cmath>

#include "testing.h"

using namespace sima;
using namespace sima::testing;

namespace {

using Inputs = std::vector<Tensor>;

// The same function from primitive ops: g · v / sqrt(Σ_row v²).
Tensor composed_weight_norm(const Tensor& v, const Tensor& g) {
  std::vector<int> rest;
  for (int d = 1; d < v.dim(); ++d) rest.push_back(d);
  return mul(g, div(v, sqrt(sum(mul(v, v), rest, true))));
}

}  // namespace

TEST_CASE("weight_norm: hand-computed values and gradients") {
  // v = [[3, 4], [0, 2]], g = [[2], [0.5]]: norms 5 and 2, W = [[1.2, 1.6], [0, 0.5]].
  Tensor v = from_vector({3, 4, 0, 2}, {2, 2}), g = from_vector({2, 0.5f}, {2, 1});
  v.requires_grad_();
  g.requires_grad_();
  Tensor w = weight_norm(v, g);
  check_close(w, {1.2f, 1.6f, 0.f, 0.5f});
  // dW = [[1, 0], [1, 1]]. Row 0: v̂ = (.6, .8), dW·v̂ = .6 → dg = .6,
  //   dv = (2/5)((1, 0) − .6·(.6, .8)) = .4·(.64, −.48) = (.256, −.192).
  // Row 1: v̂ = (0, 1), dW·v̂ = 1 → dg = 1, dv = (.5/2)((1, 1) − (0, 1)) = (.25, 0).
  w.backward(from_vector({1, 0, 1, 1}, {2, 2}));
  check_close(g.grad(), {0.6f, 1.f});
  check_close(v.grad(), {0.256f, -0.192f, 0.25f, 0.f});
}

TEST_CASE("weight_norm: every row of W has length |g|") {
  Tensor v = randn_leaf({7, 5}, 3, false), g = uniform_leaf({7, 1}, -2.f, 2.f, 4, false);
  Tensor w = weight_norm(v, g);
  for (int64_t r = 0; r < 7; ++r) {
    double ss = 0;
    for (int64_t k = 0; k < 5; ++k) ss += double(w.at({r, k})) * w.at({r, k});
    CHECK(std::sqrt(ss) == doctest::Approx(std::fabs(g.at({r, 0}))).epsilon(1e-5));
  }
}

TEST_CASE("weight_norm: equals the composition g · v / sqrt(Σ v²), values and gradients") {
  for (const Shape& s : {Shape{6, 9}, Shape{3, 2, 3, 3}, Shape{1, 4}}) {
    CAPTURE(s);
    std::vector<int64_t> gdims{s[0]};
    for (int d = 1; d < s.ndim(); ++d) gdims.push_back(1);
    Tensor v = randn_leaf(s, 11), g = uniform_leaf(Shape(gdims), 0.5f, 2.f, 12);
    check_same([](const Inputs& in) { return weight_norm(in[0], in[1]); },
               [](const Inputs& in) { return composed_weight_norm(in[0], in[1]); }, {v, g});
  }
}

TEST_CASE("weight_norm: gradcheck, 2-D and conv-shaped, frozen g or frozen v") {
  Tensor v = randn_leaf({4, 6}, 21), g = uniform_leaf({4, 1}, 0.5f, 1.5f, 22);
  CHECK_GRADCHECK([](const Inputs& in) { return weight_norm(in[0], in[1]); }, Inputs{v, g});
  Tensor v4 = randn_leaf({3, 2, 2, 2}, 23), g4 = uniform_leaf({3, 1, 1, 1}, -1.5f, -0.5f, 24);
  CHECK_GRADCHECK([](const Inputs& in) { return weight_norm(in[0], in[1]); }, Inputs{v4, g4});
  // DINO's norm_last_layer: g frozen at 1, only v learns (and the other way round).
  Tensor one = ones({4, 1});
  CHECK_GRADCHECK([one](const Inputs& in) { return weight_norm(in[0], one); }, Inputs{v});
  Tensor vf = v.detach();
  CHECK_GRADCHECK([vf](const Inputs& in) { return weight_norm(vf, in[0]); }, Inputs{g});
}

TEST_CASE("weight_norm: errors name the shapes") {
  Tensor v = ones({3, 4});
  CHECK(error_message([&] { weight_norm(v, ones({3})); }) ==
        "weight_norm: g of shape (3) for v of shape (3, 4) (expected (3, 1, ...), one length per row of v)");
  CHECK(error_message([&] { weight_norm(v, ones({4, 1})); }).find("g of shape (4, 1)") != std::string::npos);
  CHECK(error_message([&] { weight_norm(Tensor(), ones({3, 1})); }) == "weight_norm: v and g must be defined");
}
