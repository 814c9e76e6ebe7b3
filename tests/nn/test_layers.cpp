// Every layer: gradcheck w.r.t. its input and every parameter, forward checks,
// train/eval behaviour.
#include "testing.h"

#include "nn/conv2d.h"
#include "nn/layers.h"
#include "nn/linear.h"
#include "nn/mlp.h"
#include "nn/normalization.h"

using namespace sima;
using namespace sima::testing;

namespace {
// Small random values in every parameter (defaults like ones/zeros hide mistakes).
void randomise(Module& m, uint64_t seed) {
  Generator g(seed);
  for (auto& [n, p] : m.named_parameters()) g.fill_uniform(p.data(), p.numel(), -0.8f, 0.8f);
}
}  // namespace

TEST_CASE("Linear: forward = x Wᵀ + b, gradcheck") {
  Linear lin(3, 2);
  lin.weight.data()[0] = 1, lin.weight.data()[1] = 2, lin.weight.data()[2] = 3;
  lin.weight.data()[3] = -1, lin.weight.data()[4] = 0, lin.weight.data()[5] = 1;
  lin.bias.data()[0] = 0.5f, lin.bias.data()[1] = -0.5f;
  check_close(lin.forward(from_vector({1, 1, 2}, {1, 3})), {1 + 2 + 6 + 0.5f, -1 + 0 + 2 - 0.5f});
  gradcheck_module(lin, randn_leaf({2, 4, 3}, 1));
  Linear nobias(4, 5, false);
  CHECK_FALSE(nobias.bias.defined());
  CHECK(nobias.named_parameters().size() == 1);
  gradcheck_module(nobias, randn_leaf({3, 4}, 2));
}

TEST_CASE("LayerNorm: forward normalises each row, gradcheck") {
  LayerNorm ln(4, 1e-6f);
  Tensor y = ln.forward(from_vector({1, 2, 3, 4}, {1, 4}));
  // mean 2.5, biased var 1.25
  float s = 1.f / std::sqrt(1.25f + 1e-6f);
  check_close(y, {-1.5f * s, -0.5f * s, 0.5f * s, 1.5f * s});
  randomise(ln, 3);
  gradcheck_module(ln, randn_leaf({2, 3, 4}, 4));
  CHECK_THROWS_AS(ln.forward(zeros({2, 5})), Error);
}

TEST_CASE("Conv2d: gradcheck with stride, padding, groups and depthwise") {
  struct C { int64_t in, out; int k, s, p, g; };
  for (C c : {C{2, 3, 3, 1, 1, 1}, C{4, 4, 3, 2, 1, 2}, C{3, 3, 3, 1, 1, 3}, C{2, 4, 2, 2, 0, 1}}) {
    CAPTURE(c.g);
    CAPTURE(c.s);
    Conv2d conv(c.in, c.out, c.k, c.s, c.p, c.g);
    gradcheck_module(conv, randn_leaf({2, c.in, 5, 5}, 5));
  }
  // A 1x1 conv with weight 2 and bias 1 doubles and shifts.
  Conv2d one(1, 1, 1);
  one.weight.data()[0] = 2.f;
  one.bias.data()[0] = 1.f;
  check_close(one.forward(from_vector({1, 2, 3, 4}, {1, 1, 2, 2})), {3, 5, 7, 9});
  CHECK_THROWS_AS(Conv2d(3, 4, 3, 1, 1, 2), Error);
}

TEST_CASE("BatchNorm2d: training uses batch stats and updates running stats; eval uses them") {
  BatchNorm2d bn(2, 1e-5f, 0.1f);
  // Channel 0 holds 1..4, channel 1 holds 10 everywhere (B = 1, 2x2).
  Tensor x = from_vector({1, 2, 3, 4, 10, 10, 10, 10}, {1, 2, 2, 2});
  Tensor y = bn.forward(x);
  float s0 = 1.f / std::sqrt(1.25f + 1e-5f);
  check_close(y, {-1.5f * s0, -0.5f * s0, 0.5f * s0, 1.5f * s0, 0, 0, 0, 0}, 1e-4f);
  // running = 0.9·old + 0.1·batch; unbiased var of 1..4 = 5/3
  check_close(bn.running_mean, {0.25f, 1.0f});
  check_close(bn.running_var, {0.9f + 0.1f * 5.f / 3.f, 0.9f});
  bn.eval();
  Tensor ye = bn.forward(x);
  check_close(ye, {(1 - 0.25f) / std::sqrt(0.9f + 0.5f / 3.f + 1e-5f), (2 - 0.25f) / std::sqrt(0.9f + 0.5f / 3.f + 1e-5f),
                   (3 - 0.25f) / std::sqrt(0.9f + 0.5f / 3.f + 1e-5f), (4 - 0.25f) / std::sqrt(0.9f + 0.5f / 3.f + 1e-5f),
                   9 / std::sqrt(0.9f + 1e-5f), 9 / std::sqrt(0.9f + 1e-5f), 9 / std::sqrt(0.9f + 1e-5f),
                   9 / std::sqrt(0.9f + 1e-5f)},
              1e-4f, 1e-4f);
  CHECK(bn.running_mean.data()[0] == 0.25f);  // eval does not update
  CHECK(bn.num_batches_tracked.item() == 1.f);  // one training forward
  randomise(bn, 6);
  gradcheck_module(bn, randn_leaf({2, 2, 3, 3}, 7));  // eval
  bn.train();
  gradcheck_module(bn, randn_leaf({2, 2, 3, 3}, 8));  // train
}

TEST_CASE("BatchNorm2d::forward_channels_last == forward on the NCHW permutation, running stats too") {
  for (bool training : {true, false}) {
    CAPTURE(training);
    BatchNorm2d a(5), b(5);
    randomise(a, 21);
    b.load_state_dict(a.state_dict());
    a.train(training);
    b.train(training);
    Tensor x = randn_leaf({2, 3, 4, 5}, 22);  // (B, H, W, C)
    check_same([&](auto& v) { return a.forward_channels_last(v[0]); },
               [&](auto& v) { return permute(b.forward(permute(v[0], {0, 3, 1, 2})), {0, 2, 3, 1}); }, {x});
    check_close(a.weight.grad(), b.weight.grad(), 1e-5f, 1e-4f);
    check_close(a.bias.grad(), b.bias.grad(), 1e-5f, 1e-4f);
    check_close(a.running_mean, b.running_mean, 1e-6f);
    check_close(a.running_var, b.running_var, 1e-6f);
    CHECK(a.num_batches_tracked.item() == b.num_batches_tracked.item());
  }
  BatchNorm2d bn(4);
  CHECK(error_message([&] { bn.forward_channels_last(randn({2, 3, 5})); }).find("must end in 4") != std::string::npos);
}

TEST_CASE("activations, LayerScale, Mlp, Sequential: gradcheck") {
  Tensor x = away_from_zero_leaf({2, 3, 4}, 0.05f, 2.f, 9);
  GELU g;
  QuickGELU q;
  ReLU r;
  gradcheck_module(g, x);
  gradcheck_module(q, x);
  gradcheck_module(r, x);
  LayerScale ls(4, 0.5f);
  check_close(ls.forward(ones({1, 4})), {0.5f, 0.5f, 0.5f, 0.5f});
  randomise(ls, 10);
  gradcheck_module(ls, x);
  for (const char* act : {"gelu", "quick_gelu", "relu"}) {
    CAPTURE(act);
    Mlp mlp(4, 6, 3, act);
    gradcheck_module(mlp, randn_leaf({2, 4}, 11));
    CHECK(mlp.forward(zeros({5, 4})).shape() == Shape{5, 3});
  }
  Sequential seq;
  seq.push_back(std::make_shared<Linear>(4, 5)).push_back(std::make_shared<GELU>()).push_back(std::make_shared<Linear>(5, 2));
  CHECK(seq.size() == 3);
  CHECK(seq.named_parameters()[2].first == "2.weight");
  gradcheck_module(seq, randn_leaf({3, 4}, 12));
  Identity id;
  CHECK(id.forward(x).impl() == x.impl());
}

TEST_CASE("Dropout and DropPath: identity in eval, expected value kept in training") {
  Tensor x = ones({400, 250});
  Dropout d(0.3f);
  DropPath dp(0.3f);
  d.eval();
  dp.eval();
  CHECK(d.forward(x).impl() == x.impl());
  CHECK(dp.forward(x).impl() == x.impl());
  d.train();
  dp.train();
  Tensor y = d.forward(x);
  double m = 0;
  int64_t zeros_ = 0;
  for (float v : to_vector(y)) {
    m += v;
    zeros_ += v == 0.f;
    CHECK((v == 0.f || std::fabs(v - 1.f / 0.7f) < 1e-6f));
  }
  CHECK(m / y.numel() == doctest::Approx(1.0).epsilon(0.01));
  CHECK(double(zeros_) / y.numel() == doctest::Approx(0.3).epsilon(0.03));
  // DropPath drops whole samples: each row is all 0 or all 1/0.7.
  Tensor z = dp.forward(x);
  double mz = 0;
  for (int64_t i = 0; i < 400; ++i) {
    float first = z.at({i, 0});
    for (int64_t j = 0; j < 250; ++j) CHECK(z.at({i, j}) == first);
    mz += first;
  }
  CHECK(mz / 400 == doctest::Approx(1.0).epsilon(0.1));
  CHECK_THROWS_AS(Dropout(1.5f), Error);
  CHECK_THROWS_AS(DropPath(1.f), Error);
}
