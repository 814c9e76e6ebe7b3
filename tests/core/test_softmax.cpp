// softmax, log_softmax, cross_entropy: hand-computed values, double-precision reference
// loops along every dim, stability for huge logits, gradchecks, errors.
#include <cmath>

#include "testing.h"

using namespace sima;
using namespace sima::testing;

namespace {

using Inputs = std::vector<Tensor>;

// softmax / log_softmax along dim in double, with its own (outer, n, inner) walk.
std::vector<float> ref_softmax(const Tensor& x, int dim, bool log) {
  const Shape& s = x.shape();
  int64_t outer = 1, n = s[dim], inner = 1;
  for (int d = 0; d < dim; ++d) outer *= s[d];
  for (int d = dim + 1; d < s.ndim(); ++d) inner *= s[d];
  std::vector<float> out(x.numel());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t k) { return (o * n + k) * inner + i; };
      double m = -INFINITY, z = 0;
      for (int64_t k = 0; k < n; ++k) m = std::max(m, double(x.data()[at(k)]));
      for (int64_t k = 0; k < n; ++k) z += std::exp(x.data()[at(k)] - m);
      for (int64_t k = 0; k < n; ++k) {
        double lp = x.data()[at(k)] - m - std::log(z);
        out[at(k)] = static_cast<float>(log ? lp : std::exp(lp));
      }
    }
  return out;
}

// Per-row cross-entropy in double against the distribution q (B, C).
std::vector<double> ref_ce_rows(const Tensor& z, const std::vector<std::vector<double>>& q) {
  const int64_t B = z.size(0), C = z.size(1);
  std::vector<float> lp = ref_softmax(z, 1, true);
  std::vector<double> rows(B, 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c) rows[b] -= q[b][c] * lp[b * C + c];
  return rows;
}

// Reduces per-row losses like the op would.
std::vector<float> reduce_rows(const std::vector<double>& rows, Reduction r) {
  if (r == Reduction::None) return {rows.begin(), rows.end()};
  double s = 0;
  for (double v : rows) s += v;
  return {static_cast<float>(r == Reduction::Mean ? s / rows.size() : s)};
}

std::vector<float> slice_row(const Tensor& y, int64_t r) {
  const int64_t C = y.size(1);
  return {y.data() + r * C, y.data() + (r + 1) * C};
}

const Reduction kReductions[] = {Reduction::Mean, Reduction::Sum, Reduction::None};

}  // namespace

// ---- softmax / log_softmax --------------------------------------------------------

TEST_CASE("softmax, log_softmax: hand-computed values") {
  Tensor x = from_vector({0.f, std::log(3.f), 5.f, 5.f}, {2, 2});
  check_close(softmax(x, 1), {0.25f, 0.75f, 0.5f, 0.5f});
  check_close(log_softmax(x, -1), {std::log(0.25f), std::log(0.75f), std::log(0.5f), std::log(0.5f)});
  // Along dim 0: columns (0, 5) and (ln 3, 5).
  const float e5 = std::exp(5.f);
  check_close(softmax(x, 0), {1 / (1 + e5), 3 / (3 + e5), e5 / (1 + e5), e5 / (3 + e5)});
  // A 1-element lane is 1 (log: 0).
  check_close(softmax(from_vector({-7.f}), 0), {1.f});
  check_close(log_softmax(from_vector({-7.f}), 0), {0.f});
}

TEST_CASE("softmax, log_softmax: match a double-precision reference along every dim") {
  Tensor x = mul(randn_leaf({3, 4, 70}, 1, false), 3.f);
  for (int dim : {0, 1, 2, -1}) {
    CAPTURE(dim);
    const int d = dim < 0 ? dim + 3 : dim;
    check_close(softmax(x, dim), ref_softmax(x, d, false), 1e-6f, 1e-5f);
    check_close(log_softmax(x, dim), ref_softmax(x, d, true), 1e-5f, 1e-5f);
  }
  // Many rows: the parallel path.
  Tensor big = randn_leaf({500, 33}, 2, false);
  check_close(softmax(big, 1), ref_softmax(big, 1, false), 1e-6f, 1e-5f);
  check_close(log_softmax(big, 0), ref_softmax(big, 0, true), 1e-5f, 1e-5f);
}

TEST_CASE("softmax, log_softmax: parallel lanes of a non-last dim, forward and backward") {
  // (3, 8, 1001) along dim 1: 3003 interleaved lanes, split across threads mid-slab.
  Tensor x = randn_leaf({3, 8, 1001}, 5);
  Tensor g = randn_leaf({3, 8, 1001}, 6, false);
  for (bool log : {false, true}) {
    CAPTURE(log);
    x.zero_grad();
    Tensor y = log ? log_softmax(x, 1) : softmax(x, 1);
    std::vector<float> ref = ref_softmax(x, 1, log);
    check_close(y, ref, 1e-5f, 1e-5f);
    y.backward(g);
    // dx = y(g − Σ g·y) for softmax, g − p·Σ g for log_softmax, per lane (o, i).
    std::vector<float> expect(x.numel());
    for (int64_t o = 0; o < 3; ++o)
      for (int64_t i = 0; i < 1001; ++i) {
        auto at = [&](int64_t k) { return (o * 8 + k) * 1001 + i; };
        double s = 0;
        for (int64_t k = 0; k < 8; ++k) s += g.data()[at(k)] * (log ? 1.0 : ref[at(k)]);
        for (int64_t k = 0; k < 8; ++k) {
          const double gk = g.data()[at(k)], yk = ref[at(k)];
          expect[at(k)] = static_cast<float>(log ? gk - std::exp(yk) * s : yk * (gk - s));
        }
      }
    check_close(x.grad(), expect, 1e-5f, 1e-4f);
  }
}

TEST_CASE("softmax: NaN in a lane makes that lane NaN, others untouched") {
  Tensor x = from_vector({1.f, NAN, 2.f, 0.f, 0.f, 0.f}, {2, 3});
  Tensor y = softmax(x, 1);
  for (int j = 0; j < 3; ++j) CHECK(std::isnan(y.at({0, j})));
  check_close(from_vector(slice_row(y, 1)), {1.f / 3, 1.f / 3, 1.f / 3});
}

TEST_CASE("softmax, log_softmax: stable for huge logits") {
  Tensor x = from_vector({1e4f, 0.f, -1e4f, 1e4f, 1e4f, -1e4f}, {2, 3});
  Tensor s = softmax(x, 1), ls = log_softmax(x, 1);
  check_close(s, {1, 0, 0, 0.5f, 0.5f, 0});
  for (float v : to_vector(ls)) CHECK(std::isfinite(v));
  check_close(ls, {0, -1e4f, -2e4f, -std::log(2.f), -std::log(2.f), -2e4f - std::log(2.f)}, 1e-3f, 1e-6f);
  // Along a non-last dim too.
  Tensor c = softmax(x, 0), lc = log_softmax(x, 0);
  for (float v : to_vector(c)) CHECK(std::isfinite(v));
  for (float v : to_vector(lc)) CHECK(std::isfinite(v));
  check_close(c, {0.5f, 0, 0.5f, 0.5f, 1, 0.5f});
}

TEST_CASE("softmax, log_softmax: gradcheck along dims 0/1/-1, size-1 dims") {
  const Shape shapes[] = {{3, 4, 5}, {2, 1, 3}, {1, 4}, {6}};
  for (const Shape& s : shapes)
    for (int dim : {0, 1, -1}) {
      if (dim >= s.ndim()) continue;
      CAPTURE(s);
      CAPTURE(dim);
      Tensor x = randn_leaf(s, 3);
      CHECK_GRADCHECK([dim](const Inputs& v) { return softmax(v[0], dim); }, Inputs{x});
      CHECK_GRADCHECK([dim](const Inputs& v) { return log_softmax(v[0], dim); }, Inputs{x});
    }
}

TEST_CASE("softmax, log_softmax: errors") {
  CHECK_THROWS_WITH_AS(softmax(zeros({2, 3}), 2), "softmax: dim 2 out of range for a 2-d tensor", Error);
  CHECK_THROWS_WITH_AS(log_softmax(zeros({2, 3}), -3), "log_softmax: dim -3 out of range for a 2-d tensor",
                       Error);
}

// ---- cross_entropy ------------------------------------------------------------------

TEST_CASE("cross_entropy: hand-computed values and gradient") {
  // Rows: logits (0, ln 3) -> probs (1/4, 3/4).
  Tensor z = from_vector({0.f, std::log(3.f), 0.f, std::log(3.f)}, {2, 2});
  z.requires_grad_();
  std::vector<int64_t> t = {1, 0};
  check_close(cross_entropy(z, t, 0.f, Reduction::None), {-std::log(0.75f), -std::log(0.25f)});
  check_close(cross_entropy(z, t, 0.f, Reduction::Sum), {-std::log(0.75f * 0.25f)});
  Tensor loss = cross_entropy(z, t);
  CHECK(loss.dim() == 0);
  CHECK(loss.item() == doctest::Approx(-std::log(0.75 * 0.25) / 2).epsilon(1e-6));
  // dz = (softmax − onehot)/B.
  loss.backward();
  check_close(z.grad(), {0.125f, -0.125f, -0.375f, 0.375f});
  // Smoothing ε = 0.5 over C = 2: target (0.25, 0.75) for class 1.
  Tensor z1 = from_vector({0.f, std::log(3.f)}, {1, 2});
  check_close(cross_entropy(z1, std::vector<int64_t>{1}, 0.5f),
              {-(0.25f * std::log(0.25f) + 0.75f * std::log(0.75f))});
}

TEST_CASE("cross_entropy: integer targets match a double reference, with smoothing and reductions") {
  Tensor z = mul(randn_leaf({6, 7}, 10, false), 2.f);
  std::vector<int64_t> t = {0, 6, 3, 3, 1, 5};
  for (float eps : {0.f, 0.1f, 1.f})
    for (Reduction r : kReductions) {
      CAPTURE(eps);
      CAPTURE(int(r));
      std::vector<std::vector<double>> q(6, std::vector<double>(7, eps / 7.0));
      for (int b = 0; b < 6; ++b) q[b][t[b]] += 1.0 - eps;
      Tensor loss = cross_entropy(z, t, eps, r);
      CHECK(loss.shape() == (r == Reduction::None ? Shape{6} : Shape{}));
      check_close(loss, reduce_rows(ref_ce_rows(z, q), r), 1e-5f, 1e-5f);
    }
}

TEST_CASE("cross_entropy: soft targets match a double reference; smoothing applies on top") {
  Tensor z = randn_leaf({5, 4}, 11, false);
  Tensor p = softmax(randn_leaf({5, 4}, 12, false), 1);
  for (float eps : {0.f, 0.2f})
    for (Reduction r : kReductions) {
      CAPTURE(eps);
      CAPTURE(int(r));
      std::vector<std::vector<double>> q(5, std::vector<double>(4));
      for (int b = 0; b < 5; ++b)
        for (int c = 0; c < 4; ++c) q[b][c] = (1.0 - eps) * p.at({b, c}) + eps / 4.0;
      check_close(cross_entropy(z, p, eps, r), reduce_rows(ref_ce_rows(z, q), r), 1e-5f, 1e-5f);
    }
  // One-hot soft targets agree with integer targets, value and gradient.
  std::vector<int64_t> t = {2, 0, 3, 3, 1};
  Tensor onehot = zeros({5, 4});
  for (int b = 0; b < 5; ++b) onehot.at({b, t[b]}) = 1.f;
  Tensor z1 = z.detach().clone(), z2 = z.detach().clone();
  z1.requires_grad_();
  z2.requires_grad_();
  Tensor l1 = cross_entropy(z1, t, 0.1f), l2 = cross_entropy(z2, onehot, 0.1f);
  CHECK(l1.item() == doctest::Approx(l2.item()).epsilon(1e-6));
  l1.backward();
  l2.backward();
  check_close(z1.grad(), z2.grad(), 1e-6f);
}

TEST_CASE("cross_entropy: gradcheck for logits and soft targets, every reduction") {
  for (Reduction r : kReductions)
    for (float eps : {0.f, 0.3f}) {
      CAPTURE(int(r));
      CAPTURE(eps);
      Tensor z = randn_leaf({4, 5}, 20);
      std::vector<int64_t> t = {4, 0, 2, 2};
      CHECK_GRADCHECK([&](const Inputs& v) { return cross_entropy(v[0], t, eps, r); }, Inputs{z});
      // Soft targets that do not sum to one exercise the Σq factor of the gradient.
      Tensor q = uniform_leaf({4, 5}, 0.f, 0.5f, 21);
      CHECK_GRADCHECK([&](const Inputs& v) { return cross_entropy(v[0], v[1], eps, r); }, Inputs{z, q});
    }
  // Size-1 batch and a single class.
  Tensor z = randn_leaf({1, 3}, 22);
  CHECK_GRADCHECK([](const Inputs& v) { return cross_entropy(v[0], std::vector<int64_t>{1}, 0.1f); },
                  Inputs{z});
  Tensor z1 = randn_leaf({3, 1}, 23);
  CHECK_GRADCHECK([](const Inputs& v) { return cross_entropy(v[0], std::vector<int64_t>{0, 0, 0}); },
                  Inputs{z1});
}

TEST_CASE("cross_entropy: errors name the op, shapes and the bad target") {
  Tensor z = zeros({3, 4});
  CHECK_THROWS_WITH_AS(cross_entropy(z, std::vector<int64_t>{0, 5, 1}),
                       "cross_entropy: target 5 at index 1 is out of range for 4 classes", Error);
  CHECK_THROWS_WITH_AS(cross_entropy(z, std::vector<int64_t>{0, 1, -1}),
                       "cross_entropy: target -1 at index 2 is out of range for 4 classes", Error);
  CHECK_THROWS_WITH_AS(cross_entropy(z, std::vector<int64_t>{0, 1}),
                       "cross_entropy: logits of shape (3, 4) but 2 targets (batch sizes differ)", Error);
  CHECK_THROWS_WITH_AS(cross_entropy(zeros({3, 4, 1}), std::vector<int64_t>{0, 1, 2}),
                       "cross_entropy: logits must be (B, C), got shape (3, 4, 1)", Error);
  CHECK_THROWS_WITH_AS(cross_entropy(z, zeros({3, 5})),
                       "cross_entropy: soft targets of shape (3, 5) for logits of shape (3, 4) (they must match)",
                       Error);
  CHECK_THROWS_AS(cross_entropy(z, std::vector<int64_t>{0, 1, 2}, 1.5f), Error);
  CHECK_THROWS_AS(cross_entropy(z, Tensor()), Error);
}
