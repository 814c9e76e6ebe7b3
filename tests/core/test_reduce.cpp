// Reductions: hand-computed forward values, keepdim shapes, gradchecks over single,
// multiple and negative dims (with size-1 dims), ties in max, large shapes against a
// naive double loop, thread-count independence, and the errors.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/parallel.h"
#include "testing.h"

using namespace sima;
using namespace sima::testing;

namespace {
// arange(24) as (2, 3, 4): x[i, j, k] = 12i + 4j + k.
Tensor arange234() { return reshape(arange(24.f), {2, 3, 4}); }

// Naive reference over a 3-d tensor: sum (or squared deviations from `center`) over the
// dims flagged in `red`, in double, laid out with reduced dims dropped.
std::vector<double> naive_sum3(const Tensor& x, bool r0, bool r1, bool r2) {
  const int64_t A = x.size(0), B = x.size(1), C = x.size(2);
  const int64_t oa = r0 ? 1 : A, ob = r1 ? 1 : B, oc = r2 ? 1 : C;
  std::vector<double> out(oa * ob * oc, 0.0);
  for (int64_t a = 0; a < A; ++a)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t c = 0; c < C; ++c) {
        int64_t o = ((r0 ? 0 : a) * ob + (r1 ? 0 : b)) * oc + (r2 ? 0 : c);
        out[o] += x.data()[(a * B + b) * C + c];
      }
  return out;
}

// A leaf holding a shuffled permutation of 0, step, 2·step, ...: distinct values at least
// `step` apart, so finite differences never cross a tie in max.
Tensor distinct_leaf(const Shape& s, float step, uint64_t seed) {
  std::vector<float> v(s.numel());
  for (size_t i = 0; i < v.size(); ++i) v[i] = step * static_cast<float>(i) - 1.f;
  Generator g(seed);
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[g.randint(i)]);
  Tensor t = from_vector(v, s);
  t.requires_grad_(true);
  return t;
}
}  // namespace

TEST_CASE("sum / mean: forward values over all, one, several and negative dims") {
  Tensor a = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(sum(a).shape() == Shape{});
  CHECK(sum(a).item() == 21.f);
  check_close(sum(a, {0}), {5, 7, 9});
  check_close(sum(a, {1}), {6, 15});
  check_close(sum(a, {-1}), {6, 15});
  check_close(mean(a, {0}), {2.5f, 3.5f, 4.5f});
  check_close(mean(a, {-1}), {2, 5});
  CHECK(mean(a).item() == doctest::Approx(3.5));

  Tensor x = arange234();
  check_close(sum(x, {0, 2}), {60, 92, 124});
  check_close(sum(x, {2, 0}), {60, 92, 124});  // order of dims does not matter
  check_close(sum(x, {1}), {12, 15, 18, 21, 48, 51, 54, 57});
  check_close(sum(x, {-1, -2}), {66, 210});
  check_close(sum(x, {0}), {12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34});
  check_close(sum(x, {0, 1, 2}), {276});
  check_close(sum(x, {}), {276});  // empty dims = all, as torch
  check_close(mean(x, {0, 2}), {7.5f, 11.5f, 15.5f});
  check_close(mean(x, {1}), {4, 5, 6, 7, 16, 17, 18, 19});
  CHECK(mean(x).item() == 11.5f);

  // 0-d input: a no-op reduction.
  CHECK(sum(scalar_tensor(3.f), {0}).item() == 3.f);
  CHECK(sum(scalar_tensor(3.f), {0}).shape() == Shape{});
  // Empty input: sum 0, mean nan (0/0), as torch.
  CHECK(sum(zeros({0, 3})).item() == 0.f);
  check_close(sum(zeros({0, 3}), {0}), {0, 0, 0});
  CHECK(std::isnan(mean(zeros({0, 3})).item()));
}

TEST_CASE("sum / mean / var: keepdim shapes") {
  Tensor x = arange234();
  CHECK(sum(x, {1}).shape() == Shape{2, 4});
  CHECK(sum(x, {1}, true).shape() == Shape{2, 1, 4});
  CHECK(sum(x, {0, 2}, true).shape() == Shape{1, 3, 1});
  CHECK(mean(x, {-1}, true).shape() == Shape{2, 3, 1});
  CHECK(var(x, {0, 1, 2}, 1, true).shape() == Shape{1, 1, 1});
  CHECK(var(x, {0, 1, 2}).shape() == Shape{});
  check_close(sum(x, {0, 2}, true), {60, 92, 124});
  check_close(mean(x, {1}, true), {4, 5, 6, 7, 16, 17, 18, 19});
}

TEST_CASE("var: forward values, correction, and a large offset (two-pass accuracy)") {
  Tensor v = from_vector({1, 2, 3, 4});
  CHECK(var(v, {0}).item() == doctest::Approx(5.0 / 3.0).epsilon(1e-6));
  CHECK(var(v, {0}, 0).item() == doctest::Approx(1.25).epsilon(1e-6));
  CHECK(var(v, {0}, 2).item() == doctest::Approx(2.5).epsilon(1e-6));
  Tensor a = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  check_close(var(a, {1}), {1, 1});
  check_close(var(a, {0}), {4.5f, 4.5f, 4.5f});
  check_close(var(a, {0}, 0), {2.25f, 2.25f, 2.25f});
  // Over dims {0, 2} of arange(24) as (2,3,4): {0..3, 12..15} + 4j, Σ(x - 7.5 - 4j)² = 298.
  check_close(var(arange234(), {0, 2}), {298.f / 7, 298.f / 7, 298.f / 7});
  check_close(var(arange234(), {0, 2}, 0, true), {298.f / 8, 298.f / 8, 298.f / 8});
  // E[x²] - E[x]² in float would lose everything here; two passes keep it exact.
  Tensor big = from_vector({1e6f, 1e6f + 1, 1e6f + 2, 1e6f + 3, 1e6f + 4, 1e6f + 5, 1e6f + 6, 1e6f + 7},
                           {2, 4});
  check_close(var(big, {1}), {5.f / 3, 5.f / 3});
  check_close(var(big, {0, 1}), {6.f});
  // One element with the unbiased default: 0/0, nan as torch.
  CHECK(std::isnan(var(from_vector({2.f}), {0}).item()));
}

TEST_CASE("sum / mean / var: gradcheck over dims, keepdim, size-1 and negative dims") {
  const std::vector<std::pair<Shape, std::vector<int>>> cases = {
      {{3, 1, 4}, {1}},     {{3, 1, 4}, {-1}},      {{3, 1, 4}, {0, 2}},  {{3, 1, 4}, {0, 1, 2}},
      {{3, 1, 4}, {}},      {{2, 3, 2, 3}, {1, 3}}, {{2, 3, 2, 3}, {0, 2}}, {{2, 3, 2, 3}, {-3, -2}},
      {{5}, {0}},           {{1, 1}, {0}},          {{4, 1}, {-2}},
  };
  for (auto& [shape_, dims_] : cases)
    for (bool keepdim : {false, true}) {
      const auto& shape = shape_; const auto& dims = dims_;  // clang 14 cannot capture a structured binding
      CAPTURE(shape);
      CAPTURE(dims.size());
      CAPTURE(keepdim);
      Tensor x = uniform_leaf(shape, -1.f, 1.f, 7);
      std::vector<Tensor> in{x};
      CHECK_GRADCHECK([&](const std::vector<Tensor>& v) { return sum(v[0], dims, keepdim); }, in);
      CHECK_GRADCHECK([&](const std::vector<Tensor>& v) { return mean(v[0], dims, keepdim); }, in);
      int64_t n = 1;
      for (int i = 0; i < shape.ndim(); ++i)
        if (dims.empty() || std::find_if(dims.begin(), dims.end(), [&](int d) {
                              return (d < 0 ? d + shape.ndim() : d) == i;
                            }) != dims.end())
          n *= shape[i];
      if (n > 1)
        CHECK_GRADCHECK([&](const std::vector<Tensor>& v) { return var(v[0], dims, 1, keepdim); }, in);
      CHECK_GRADCHECK([&](const std::vector<Tensor>& v) { return var(v[0], dims, 0, keepdim); }, in);
    }
  Tensor x = uniform_leaf({2, 3}, -1.f, 1.f, 8);
  CHECK_GRADCHECK([](const std::vector<Tensor>& v) { return mul(sum(v[0]), sum(v[0])); },
                  std::vector<Tensor>{x});
  CHECK_GRADCHECK([](const std::vector<Tensor>& v) { return mean(v[0]); }, std::vector<Tensor>{x});
}

TEST_CASE("sum / mean / var: gradients by hand") {
  Tensor x = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  x.requires_grad_(true);
  sum(x, {1}).backward(from_vector({1, 10}));
  check_close(x.grad(), {1, 1, 1, 10, 10, 10});
  x.zero_grad();
  mean(x, {0}).backward(from_vector({2, 4, 6}));
  check_close(x.grad(), {1, 2, 3, 1, 2, 3});
  x.zero_grad();
  // var over dim 1 (mean 2 and 5, N - 1 = 2): gx = gy · (x - m).
  var(x, {1}).backward(from_vector({1, 2}));
  check_close(x.grad(), {-1, 0, 1, -2, 0, 2});
}

TEST_CASE("sum / mean / var: large shapes agree with a naive double loop") {
  // (37, 300, 5): inner group kept with many rows; (3, 40, 700): kept rows wider than a
  // column block; all reduced: the blocked full sum (over 65 536 elements).
  for (Shape s : {Shape{37, 300, 5}, Shape{3, 40, 700}, Shape{2, 300, 200}}) {
    Tensor x = uniform_leaf(s, -1.f, 3.f, 11, false);
    for (int mask = 1; mask < 8; ++mask) {
      bool r0 = mask & 1, r1 = mask & 2, r2 = mask & 4;
      CAPTURE(s);
      CAPTURE(mask);
      std::vector<int> dims;
      if (r0) dims.push_back(0);
      if (r1) dims.push_back(1);
      if (r2) dims.push_back(2);
      std::vector<double> ref = naive_sum3(x, r0, r1, r2);
      Tensor got = sum(x, dims);
      REQUIRE(got.numel() == static_cast<int64_t>(ref.size()));
      double n = static_cast<double>(x.numel()) / ref.size();
      Tensor m = mean(x, dims);
      bool ok = true;
      for (size_t i = 0; i < ref.size(); ++i) {
        ok = ok && std::fabs(got.data()[i] - ref[i]) <= 1e-5 * (1 + std::fabs(ref[i]));
        ok = ok && std::fabs(m.data()[i] - ref[i] / n) <= 1e-5 * (1 + std::fabs(ref[i] / n));
      }
      CHECK(ok);
    }
    // var over dims {0, 2} against a naive two-pass in double.
    Tensor v = var(x, {0, 2});
    const int64_t A = s[0], B = s[1], C = s[2];
    bool ok = true;
    for (int64_t b = 0; b < B; ++b) {
      double mu = 0, ss = 0;
      for (int64_t a = 0; a < A; ++a)
        for (int64_t c = 0; c < C; ++c) mu += x.data()[(a * B + b) * C + c];
      mu /= A * C;
      for (int64_t a = 0; a < A; ++a)
        for (int64_t c = 0; c < C; ++c) ss += std::pow(x.data()[(a * B + b) * C + c] - mu, 2);
      double ref = ss / (A * C - 1);
      ok = ok && std::fabs(v.data()[b] - ref) <= 1e-5 * ref;
    }
    CHECK(ok);
  }
}

TEST_CASE("reductions do not depend on the thread count") {
  Tensor x = uniform_leaf({64, 257, 9}, -1.f, 1.f, 12, false);
  Tensor big = uniform_leaf({300000}, -1.f, 1.f, 13, false);
  int prev = num_threads();
  auto run = [&] {
    return std::vector<Tensor>{sum(x, {1}), sum(x, {0, 2}), mean(x, {2}), var(x, {0}),
                               sum(big), var(big, {0}), max(x, 1).values, max(big)};
  };
  set_num_threads(1);
  auto one = run();
  set_num_threads(2);
  auto two = run();
  set_num_threads(prev);
  for (size_t i = 0; i < one.size(); ++i) {
    CAPTURE(i);
    CHECK(max_abs_diff(one[i], two[i]) == 0.f);
  }
}

TEST_CASE("max over a dim: values, indices, first index on ties, gradient to it") {
  Tensor x = from_vector({1, 3, 3, 5, 2, 5}, {2, 3});
  x.requires_grad_(true);
  MaxResult r1 = max(x, 1);
  check_close(r1.values, {3, 5});
  CHECK(r1.indices == std::vector<int64_t>{1, 0});
  CHECK(r1.values.shape() == Shape{2});
  r1.values.backward(from_vector({1, 2}));
  check_close(x.grad(), {0, 1, 0, 2, 0, 0});  // only the first of each tie

  x.zero_grad();
  MaxResult r0 = max(x, -2, true);
  CHECK(r0.values.shape() == Shape{1, 3});
  check_close(r0.values, {5, 3, 5});
  CHECK(r0.indices == std::vector<int64_t>{1, 0, 1});
  r0.values.backward(from_vector({1, 2, 3}, {1, 3}));
  check_close(x.grad(), {0, 2, 0, 1, 0, 3});

  // All equal: index 0 everywhere.
  CHECK(max(ones({2, 4}), 1).indices == std::vector<int64_t>{0, 0});
  CHECK(argmax(x, 1) == std::vector<int64_t>{1, 0});
  CHECK(argmax(x, 0) == std::vector<int64_t>{1, 0, 1});
  // 3-d, middle dim: x[i, j, k] = 12i + 4j + k -> max at j = 2.
  MaxResult r3 = max(arange234(), 1);
  check_close(r3.values, {8, 9, 10, 11, 20, 21, 22, 23});
  CHECK(r3.indices == std::vector<int64_t>(8, 2));
  // NaN wins and propagates, as in torch.
  MaxResult rn = max(from_vector({1.f, NAN, 3.f, NAN}), 0);
  CHECK(std::isnan(rn.values.item()));
  CHECK(rn.indices == std::vector<int64_t>{1});
}

TEST_CASE("max over all elements: value and gradient to the first maximum") {
  Tensor x = from_vector({1, 5, -2, 5, 0, 5}, {3, 2});
  x.requires_grad_(true);
  Tensor m = max(x);
  CHECK(m.shape() == Shape{});
  CHECK(m.item() == 5.f);
  m.backward(scalar_tensor(3.f));
  check_close(x.grad(), {0, 3, 0, 0, 0, 0});
  CHECK(max(from_vector({-3.f, -1.f, -2.f})).item() == -1.f);
  // Across the fixed blocks of the parallel path: the first of two equal maxima wins.
  Tensor big = zeros({200000});
  big.data()[150000] = 7.f;
  big.data()[10] = 7.f;
  big.requires_grad_(true);
  max(big).backward();
  CHECK(big.grad().data()[10] == 1.f);
  CHECK(big.grad().data()[150000] == 0.f);
}

TEST_CASE("max: gradcheck with distinct values, keepdim, size-1 and negative dims") {
  for (Shape s : {Shape{3, 4}, Shape{2, 1, 5}, Shape{4, 3, 2}})
    for (int dim = -s.ndim(); dim < s.ndim(); ++dim)
      for (bool keepdim : {false, true}) {
        CAPTURE(s);
        CAPTURE(dim);
        CAPTURE(keepdim);
        Tensor x = distinct_leaf(s, 0.1f, 21);
        CHECK_GRADCHECK([&](const std::vector<Tensor>& v) { return max(v[0], dim, keepdim).values; },
                        std::vector<Tensor>{x});
      }
  Tensor x = distinct_leaf({3, 4}, 0.1f, 22);
  CHECK_GRADCHECK([](const std::vector<Tensor>& v) { return max(v[0]); }, std::vector<Tensor>{x});
}

TEST_CASE("max: large shapes agree with a naive scan") {
  Tensor x = uniform_leaf({5, 40, 300}, -1.f, 1.f, 31, false);
  for (int dim = 0; dim < 3; ++dim) {
    CAPTURE(dim);
    MaxResult r = max(x, dim);
    const int64_t A = 5, B = 40, C = 300;
    int64_t strides[3] = {B * C, C, 1}, sizes[3] = {A, B, C};
    bool ok = true;
    int64_t o = 0;
    for (int64_t a = 0; a < (dim == 0 ? 1 : A); ++a)
      for (int64_t b = 0; b < (dim == 1 ? 1 : B); ++b)
        for (int64_t c = 0; c < (dim == 2 ? 1 : C); ++c, ++o) {
          const float* base = x.data() + a * strides[0] + b * strides[1] + c * strides[2];
          int64_t best = 0;
          for (int64_t r2 = 1; r2 < sizes[dim]; ++r2)
            if (base[r2 * strides[dim]] > base[best * strides[dim]]) best = r2;
          ok = ok && r.indices[o] == best && r.values.data()[o] == base[best * strides[dim]];
        }
    CHECK(ok);
  }
  std::vector<float> v = to_vector(x);
  CHECK(max(x).item() == *std::max_element(v.begin(), v.end()));
  // Long rows (past the 8-lane scan): first of tied maxima, and a NaN late in the row.
  std::vector<float> rows(2 * 20, 0.f);
  rows[11] = rows[17] = 4.f;  // row 0: max at 11 and 17
  rows[20 + 2] = 9.f;
  rows[20 + 13] = NAN;  // row 1: NaN at 13 beats 9 at 2
  MaxResult rl = max(from_vector(rows, {2, 20}), -1);
  CHECK(rl.indices == std::vector<int64_t>{11, 13});
  CHECK(rl.values.data()[0] == 4.f);
  CHECK(std::isnan(rl.values.data()[1]));
}

TEST_CASE("reduction errors name the op, the dim and the shape") {
  Tensor x = zeros({2, 3});
  CHECK_THROWS_WITH_AS(sum(x, {2}), "sum: dim 2 out of range for a 2-d tensor", Error);
  CHECK_THROWS_WITH_AS(mean(x, {-3}), "mean: dim -3 out of range for a 2-d tensor", Error);
  CHECK_THROWS_WITH_AS(sum(x, {1, -1}),
                       "sum: dim -1 appears more than once in dims (1, -1) for shape (2, 3)", Error);
  CHECK_THROWS_AS(var(x, {0, 0}), Error);
  CHECK_THROWS_WITH_AS(max(x, 5), "max: dim 5 out of range for a 2-d tensor", Error);
  CHECK_THROWS_WITH_AS(max(zeros({2, 0}), 1),
                       "max: cannot reduce over dim 1 of size 0 in shape (2, 0)", Error);
  CHECK_THROWS_WITH_AS(max(zeros({0})), doctest::Contains("empty tensor of shape (0)"), Error);
  CHECK_THROWS_AS(argmax(x, -3), Error);
}
