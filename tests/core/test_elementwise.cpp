// Elementwise ops: hand-computed forward values, gradchecks (with broadcasting
// and size-1 dims), and the errors they raise.
#include "testing.h"

using namespace sima;
using namespace sima::testing;

TEST_CASE("binary ops: forward values with broadcasting") {
  Tensor a = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = from_vector({10, 20, 30}, {3});
  Tensor c = from_vector({2, 4}, {2, 1});
  check_close(add(a, b), {11, 22, 33, 14, 25, 36});
  check_close(sub(a, b), {-9, -18, -27, -6, -15, -24});
  check_close(mul(a, c), {2, 4, 6, 16, 20, 24});
  check_close(div(a, c), {0.5f, 1, 1.5f, 1, 1.25f, 1.5f});
  check_close(pow(a, c), {1, 4, 9, 256, 625, 1296});
  // (2,1) + (3) -> (2,3): both sides broadcast.
  check_close(add(c, b), {12, 22, 32, 14, 24, 34});
  CHECK(add(c, b).shape() == Shape{2, 3});
  // 0-d with anything.
  check_close(mul(a, scalar_tensor(2.f)), {2, 4, 6, 8, 10, 12});
  // Middle-dim broadcast (2,1,3) * (1,2,1) -> (2,2,3).
  Tensor d = from_vector({1, 2, 3, 4, 5, 6}, {2, 1, 3});
  Tensor e = from_vector({1, -1}, {1, 2, 1});
  check_close(mul(d, e), {1, 2, 3, -1, -2, -3, 4, 5, 6, -4, -5, -6});
}

TEST_CASE("scalar and unary ops: forward values") {
  Tensor x = from_vector({-2.f, -0.5f, 0.f, 0.25f, 4.f});
  check_close(add(x, 1.f), {-1, 0.5f, 1, 1.25f, 5});
  check_close(sub(x, 1.f), {-3, -1.5f, -1, -0.75f, 3});
  check_close(rsub(x, 1.f), {3, 1.5f, 1, 0.75f, -3});
  check_close(mul(x, 2.f), {-4, -1, 0, 0.5f, 8});
  check_close(div(x, 2.f), {-1, -0.25f, 0, 0.125f, 2});
  check_close(neg(x), {2, 0.5f, 0, -0.25f, -4});
  check_close(abs(x), {2, 0.5f, 0, 0.25f, 4});
  check_close(sign(x), {-1, -1, 0, 1, 1});
  check_close(square(x), {4, 0.25f, 0, 0.0625f, 16});
  check_close(clamp(x, -1.f, 1.f), {-1, -0.5f, 0, 0.25f, 1});
  check_close(clamp_min(x, 0.f), {0, 0, 0, 0.25f, 4});
  check_close(clamp_max(x, 0.f), {-2, -0.5f, 0, 0, 0});
  Tensor p = from_vector({0.25f, 1.f, 4.f});
  check_close(sqrt(p), {0.5f, 1, 2});
  check_close(rsqrt(p), {2, 1, 0.5f});
  check_close(exp(from_vector({0.f, 1.f})), {1.f, 2.7182817f});
  check_close(log(from_vector({1.f, 2.7182817f})), {0.f, 1.f});
  check_close(pow(p, 1.5f), {0.125f, 1, 8});
  check_close(pow(p, 0.f), {1, 1, 1});
  // NaN propagates through clamp, as in PyTorch.
  CHECK(std::isnan(clamp(from_vector({NAN}), 0.f, 1.f).item()));
}

TEST_CASE("binary ops: gradcheck incl. broadcasting and size-1 dims") {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{2, 3}, {2, 3}}, {{2, 3}, {3}}, {{2, 1, 4}, {3, 1}}, {{1, 3}, {2, 1}}, {{4}, {}}};
  for (auto [sa_, sb_] : shapes) {
    const auto& sa = sa_; const auto& sb = sb_;  // clang 14 cannot capture a structured binding
    CAPTURE(sa);
    CAPTURE(sb);
    Tensor a = uniform_leaf(sa, 0.5f, 2.f, 1);
    Tensor b = uniform_leaf(sb, 0.5f, 2.f, 2);
    auto in = std::vector<Tensor>{a, b};
    CHECK_GRADCHECK([](const std::vector<Tensor>& v) { return add(v[0], v[1]); }, in);
    CHECK_GRADCHECK([](const std::vector<Tensor>& v) { return sub(v[0], v[1]); }, in);
    CHECK_GRADCHECK([](const std::vector<Tensor>& v) { return mul(v[0], v[1]); }, in);
    CHECK_GRADCHECK([](const std::vector<Tensor>& v) { return div(v[0], v[1]); }, in);
    CHECK_GRADCHECK([](const std::vector<Tensor>& v) { return pow(v[0], v[1]); }, in);
  }
}

TEST_CASE("binary ops: gradient only for the input that requires it") {
  Tensor a = uniform_leaf({2, 3}, 0.5f, 2.f, 1);
  Tensor b = uniform_leaf({3}, 0.5f, 2.f, 2, /*grad=*/false);
  CHECK_GRADCHECK([](const std::vector<Tensor>& v) { return mul(v[0], v[1]); },
                  std::vector<Tensor>{a, b});
  CHECK_FALSE(b.grad().defined());
}

TEST_CASE("scalar and unary ops: gradcheck") {
  Tensor pos = uniform_leaf({3, 4}, 0.5f, 2.f, 3);
  Tensor any = away_from_zero_leaf({3, 4}, 0.1f, 2.f, 4);
  using Fn = Tensor (*)(const Tensor&);
  struct Case { const char* name; Fn fn; bool positive_only; };
  const Case cases[] = {
      {"neg", [](const Tensor& x) { return neg(x); }, false},
      {"exp", [](const Tensor& x) { return exp(x); }, false},
      {"log", [](const Tensor& x) { return log(x); }, true},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, true},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, true},
      {"abs", [](const Tensor& x) { return abs(x); }, false},
      {"square", [](const Tensor& x) { return square(x); }, false},
      {"clamp", [](const Tensor& x) { return clamp(x, -0.95f, 1.05f); }, false},
      {"pow1.5", [](const Tensor& x) { return pow(x, 1.5f); }, true},
      {"pow3", [](const Tensor& x) { return pow(x, 3.f); }, false},
      {"add_s", [](const Tensor& x) { return add(x, 3.f); }, false},
      {"rsub_s", [](const Tensor& x) { return rsub(x, 3.f); }, false},
      {"mul_s", [](const Tensor& x) { return mul(x, -3.f); }, false},
      {"div_s", [](const Tensor& x) { return div(x, 4.f); }, false},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    Tensor x = c.positive_only ? pos : any;
    CHECK_GRADCHECK([&](const std::vector<Tensor>& v) { return c.fn(v[0]); }, std::vector<Tensor>{x});
  }
  // sign has zero gradient everywhere (away from 0).
  any.zero_grad();
  Tensor y = sign(any);
  y.backward(ones(y.shape()));
  for (int64_t i = 0; i < any.numel(); ++i) CHECK(any.grad().data()[i] == 0.f);
}

TEST_CASE("elementwise errors name the op and the shapes") {
  Tensor a = zeros({2, 3}), b = zeros({4, 3});
  CHECK_THROWS_WITH_AS(add(a, b), "add: shapes (2, 3) and (4, 3) cannot be broadcast", Error);
  CHECK_THROWS_WITH_AS(mul(a, zeros({2})), "mul: shapes (2, 3) and (2) cannot be broadcast", Error);
  CHECK_THROWS_AS(clamp(a, 1.f, 0.f), Error);
}

TEST_CASE("broadcast backward on tensors big enough to run in parallel == naive sums") {
  // (R, C) * (C) and (R, C) * (R, 1): the gradients of the small operand are column
  // sums and row sums of gy·a, computed here with plain double loops.
  const int64_t R = 300, C = 257;
  Tensor a = randn_leaf({R, C}, 21);
  Tensor col = randn_leaf({C}, 22), row = randn_leaf({R, 1}, 23);
  Tensor gy = randn_leaf({R, C}, 24, false);
  mul(a, col).backward(gy);
  mul(a, row).backward(gy);
  std::vector<double> cs(C, 0.0), rs(R, 0.0);
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < C; ++j) {
      double v = double(gy.at({i, j})) * a.at({i, j});
      cs[j] += v;
      rs[i] += v;
    }
  for (int64_t j = 0; j < C; ++j) CHECK(col.grad().at({j}) == doctest::Approx(cs[j]).epsilon(1e-4));
  for (int64_t i = 0; i < R; ++i) CHECK(row.grad().at({i, 0}) == doctest::Approx(rs[i]).epsilon(1e-4));
}
