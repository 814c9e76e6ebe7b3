// dropout and drop_path: mask statistics, exact scaling, determinism, identity in eval,
// gradients through the mask, errors.
#include <cmath>

#include "testing.h"

using namespace sima;
using namespace sima::testing;

namespace {
using Inputs = std::vector<Tensor>;
}

TEST_CASE("dropout: mask fraction ≈ p and survivors scaled exactly by 1/(1-p)") {
  for (float p : {0.1f, 0.3f, 0.75f}) {
    CAPTURE(p);
    Tensor x = uniform_leaf({400, 500}, 0.5f, 2.f, 1, false);  // no zeros in x
    Generator gen(42);
    Tensor y = dropout(x, p, true, gen);
    REQUIRE(y.shape() == x.shape());
    const float scale = 1.f / (1.f - p);
    int64_t dropped = 0, wrong = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      if (y.data()[i] == 0.f) ++dropped;
      else if (y.data()[i] != x.data()[i] * scale) ++wrong;
    }
    CHECK(wrong == 0);
    // 2·10⁵ draws: the fraction's standard deviation is below 0.0011.
    CHECK(std::fabs(double(dropped) / x.numel() - p) < 0.006);
  }
}

TEST_CASE("dropout: same seed gives the same mask, another seed another") {
  Tensor x = ones({1000});
  Generator g1(7), g2(7), g3(8);
  Tensor a = dropout(x, 0.5f, true, g1), b = dropout(x, 0.5f, true, g2), c = dropout(x, 0.5f, true, g3);
  CHECK(to_vector(a) == to_vector(b));
  CHECK(to_vector(a) != to_vector(c));
  // The stream advanced: a second call draws a new mask.
  CHECK(to_vector(dropout(x, 0.5f, true, g1)) != to_vector(a));
  // The default dropout stream follows manual_seed.
  manual_seed(5);
  Tensor d = dropout(x, 0.5f, true);
  manual_seed(5);
  CHECK(to_vector(dropout(x, 0.5f, true)) == to_vector(d));
}

TEST_CASE("dropout: identity in eval mode and for p = 0; zeros for p = 1") {
  Tensor x = randn_leaf({4, 5}, 2);
  CHECK(dropout(x, 0.5f, false).impl() == x.impl());
  CHECK(dropout(x, 0.f, true).impl() == x.impl());
  CHECK(drop_path(x, 0.5f, false).impl() == x.impl());
  CHECK(drop_path(x, 0.f, true).impl() == x.impl());
  Tensor z = dropout(x, 1.f, true);
  for (float v : to_vector(z)) CHECK(v == 0.f);
  Tensor zp = drop_path(x, 1.f, true);
  for (float v : to_vector(zp)) CHECK(v == 0.f);
  z.backward(ones({4, 5}));
  for (float v : to_vector(x.grad())) CHECK(v == 0.f);
}

TEST_CASE("dropout: gradient is the mask times the scale") {
  Tensor x = uniform_leaf({50, 40}, 0.5f, 2.f, 3);
  Generator gen(9);
  Tensor y = dropout(x, 0.4f, true, gen);
  Tensor g = randn_leaf({50, 40}, 4, false);
  y.backward(g);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float m = y.data()[i] == 0.f ? 0.f : 1.f / 0.6f;
    CHECK(x.grad().data()[i] == g.data()[i] * m);
  }
  // And a gradcheck with the mask fixed by re-seeding on every call.
  CHECK_GRADCHECK([](const Inputs& v) {
    Generator gg(11);
    return dropout(v[0], 0.3f, true, gg);
  }, Inputs{randn_leaf({3, 4, 1}, 5)});
}

TEST_CASE("drop_path: zeros whole samples, scales the kept ones by 1/keep") {
  Tensor x = uniform_leaf({2000, 3, 2}, 0.5f, 2.f, 6);
  Generator gen(12);
  const float p = 0.25f, scale = 1.f / (1.f - p);
  Tensor y = drop_path(x, p, true, gen);
  int64_t dropped = 0;
  for (int64_t b = 0; b < 2000; ++b) {
    const bool drop = y.at({b, 0, 0}) == 0.f;
    dropped += drop;
    for (int64_t j = 0; j < 6; ++j) {
      const float xv = x.data()[b * 6 + j], yv = y.data()[b * 6 + j];
      CHECK(yv == (drop ? 0.f : xv * scale));
    }
  }
  CHECK(std::fabs(double(dropped) / 2000 - p) < 0.04);  // 4 standard deviations
  // Gradient: g times the per-sample mask.
  Tensor g = randn_leaf({2000, 3, 2}, 7, false);
  y.backward(g);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float m = y.data()[i / 6 * 6] == 0.f ? 0.f : scale;
    CHECK(x.grad().data()[i] == g.data()[i] * m);
  }
  // Same seed, same samples dropped; a 1-d input drops single elements.
  Generator g1(3), g2(3);
  Tensor v = ones({64});
  CHECK(to_vector(drop_path(v, 0.5f, true, g1)) == to_vector(drop_path(v, 0.5f, true, g2)));
  CHECK_GRADCHECK([](const Inputs& in) {
    Generator gg(13);
    return drop_path(in[0], 0.5f, true, gg);
  }, Inputs{randn_leaf({6, 2, 3}, 8)});
}

TEST_CASE("dropout, drop_path: errors") {
  Tensor x = zeros({3});
  CHECK_THROWS_WITH_AS(dropout(x, 1.5f, true), "dropout: probability has to be between 0 and 1, but got 1.5",
                       Error);
  CHECK_THROWS_WITH_AS(dropout(x, -0.1f, false),
                       "dropout: probability has to be between 0 and 1, but got -0.1", Error);
  CHECK_THROWS_WITH_AS(drop_path(x, 2.f, true),
                       "drop_path: probability has to be between 0 and 1, but got 2", Error);
  CHECK_THROWS_AS(drop_path(scalar_tensor(1.f), 0.5f, true), Error);
}
