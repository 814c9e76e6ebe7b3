// layer_norm, batch_norm2d, normalize: hand-computed values, naive double-precision
// reference loops, gradchecks (size-1 dims, non-last dims, both eps branches), errors.
#include <cmath>

#include "testing.h"

using namespace sima;
using namespace sima::testing;

namespace {

using Inputs = std::vector<Tensor>;

// (outer, n, inner) of a shape seen along dim, computed independently of the library.
struct Lay { int64_t outer = 1, n = 1, inner = 1; };
Lay lay(const Shape& s, int dim) {
  Lay l;
  for (int d = 0; d < s.ndim(); ++d) {
    if (d < dim) l.outer *= s[d];
    else if (d == dim) l.n = s[d];
    else l.inner *= s[d];
  }
  return l;
}

// layer_norm over the last dim in double.
std::vector<float> ref_layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  const int64_t C = x.size(-1), R = x.numel() / C;
  std::vector<float> out(x.numel());
  for (int64_t r = 0; r < R; ++r) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < C; ++c) m += x.data()[r * C + c];
    m /= C;
    for (int64_t c = 0; c < C; ++c) v += std::pow(x.data()[r * C + c] - m, 2);
    v /= C;
    for (int64_t c = 0; c < C; ++c) {
      double y = (x.data()[r * C + c] - m) / std::sqrt(v + eps);
      if (w.defined()) y *= w.data()[c];
      if (b.defined()) y += b.data()[c];
      out[r * C + c] = static_cast<float>(y);
    }
  }
  return out;
}

// normalize along dim in double.
std::vector<float> ref_normalize(const Tensor& x, int p, int dim, double eps) {
  Lay l = lay(x.shape(), dim);
  std::vector<float> out(x.numel());
  for (int64_t o = 0; o < l.outer; ++o)
    for (int64_t i = 0; i < l.inner; ++i) {
      double nrm = 0;
      for (int64_t k = 0; k < l.n; ++k) {
        double v = x.data()[(o * l.n + k) * l.inner + i];
        nrm += p == 1 ? std::fabs(v) : v * v;
      }
      if (p == 2) nrm = std::sqrt(nrm);
      for (int64_t k = 0; k < l.n; ++k) {
        int64_t j = (o * l.n + k) * l.inner + i;
        out[j] = static_cast<float>(x.data()[j] / std::max(nrm, eps));
      }
    }
  return out;
}

}  // namespace

// ---- layer_norm -----------------------------------------------------------------

TEST_CASE("layer_norm: hand-computed values") {
  // Row [1, 2, 3, 4]: mean 2.5, biased var 1.25, x̂ = (x − 2.5)/√1.25.
  // A constant row [2, 2, 2, 2]: x̂ = 0 (eps keeps 0/0 away), y = b.
  Tensor x = from_vector({1, 2, 3, 4, 2, 2, 2, 2}, {2, 4});
  const float a = 1.5f / std::sqrt(1.25f + 1e-3f), c = 0.5f / std::sqrt(1.25f + 1e-3f);
  check_close(layer_norm(x, Tensor(), Tensor(), 1e-3f), {-a, -c, c, a, 0, 0, 0, 0}, 1e-6f);
  Tensor w = from_vector({1, 2, 3, 4}), b = from_vector({0, 1, 0, -1});
  check_close(layer_norm(x, w, b, 1e-3f), {-a, 1 - 2 * c, 3 * c, 4 * a - 1, 0, 1, 0, -1}, 1e-6f);
  // A constant row with eps: x̂ = 0, y = b.
  check_close(layer_norm(from_vector({5, 5, 5}, {1, 3}), Tensor(), from_vector({1, 2, 3}), 1e-5f),
              {1, 2, 3});
}

TEST_CASE("layer_norm: matches a double-precision reference") {
  for (bool affine : {true, false}) {
    CAPTURE(affine);
    Tensor x = randn_leaf({3, 5, 37}, 1, false);
    Tensor w = affine ? randn_leaf({37}, 2, false) : Tensor();
    Tensor b = affine ? randn_leaf({37}, 3, false) : Tensor();
    check_close(layer_norm(x, w, b, 1e-6f), ref_layer_norm(x, w, b, 1e-6), 2e-5f, 2e-5f);
  }
  // Many rows: the parallel path.
  Tensor x = mul(randn_leaf({600, 64}, 4, false), 3.f);
  check_close(layer_norm(x, Tensor(), Tensor()), ref_layer_norm(x, Tensor(), Tensor(), 1e-5), 3e-5f,
              2e-5f);
}

TEST_CASE("layer_norm: gradcheck, incl. size-1 dims and missing weight/bias") {
  auto ln = [](const Inputs& v) { return layer_norm(v[0], v[1], v[2], 1e-5f); };
  const Shape shapes[] = {{2, 3, 5}, {4, 1}, {1, 6}, {7}};
  for (const Shape& s : shapes) {
    CAPTURE(s);
    const int64_t C = s[s.ndim() - 1];
    Tensor x = randn_leaf(s, 10), w = uniform_leaf({C}, 0.5f, 1.5f, 11), b = randn_leaf({C}, 12);
    CHECK_GRADCHECK(ln, Inputs{x, w, b});
    CHECK_GRADCHECK(ln, Inputs{x, Tensor(), Tensor()});
    CHECK_GRADCHECK(ln, Inputs{x, w, Tensor()});
  }
  // Only the parameters require grad.
  Tensor x = randn_leaf({3, 4}, 13, false), w = randn_leaf({4}, 14), b = randn_leaf({4}, 15);
  CHECK_GRADCHECK(ln, Inputs{x, w, b});
}

TEST_CASE("layer_norm: gradient of the weight sums over all rows (parallel partials)") {
  // dL/dw for L = Σ y equals Σ_rows x̂; dL/db = number of rows.
  Tensor x = randn_leaf({513, 40}, 16, false), w = ones({40}), b = zeros({40});
  w.requires_grad_();
  b.requires_grad_();
  layer_norm(x, w, b).backward(ones({513, 40}));
  std::vector<float> xh = ref_layer_norm(x, Tensor(), Tensor(), 1e-5);
  std::vector<float> expect(40, 0.f);
  for (int64_t r = 0; r < 513; ++r)
    for (int c = 0; c < 40; ++c) expect[c] += xh[r * 40 + c];
  check_close(w.grad(), expect, 1e-3f, 1e-4f);
  check_close(b.grad(), std::vector<float>(40, 513.f));
}

TEST_CASE("layer_norm: errors name the op and shapes") {
  Tensor x = zeros({2, 5});
  CHECK_THROWS_WITH_AS(layer_norm(x, zeros({4}), Tensor()),
                       "layer_norm: weight of shape (4) for input of shape (2, 5) (expected (5))", Error);
  CHECK_THROWS_WITH_AS(layer_norm(x, Tensor(), zeros({5, 1})),
                       "layer_norm: bias of shape (5, 1) for input of shape (2, 5) (expected (5))", Error);
  CHECK_THROWS_AS(layer_norm(scalar_tensor(1.f), Tensor(), Tensor()), Error);
}

// ---- batch_norm2d ---------------------------------------------------------------

TEST_CASE("batch_norm2d: training values and running-stat update by hand") {
  // Channel 0 holds [1, 2 | 3, 4] (two samples), channel 1 holds [0, 0 | 0, 4].
  Tensor x = from_vector({1, 2, 0, 0, 3, 4, 0, 4}, {2, 2, 1, 2});
  Tensor rm = from_vector({0, 1}), rv = from_vector({1, 2});
  Tensor y = batch_norm2d(x, Tensor(), Tensor(), rm, rv, true, 0.1f, 0.f);
  // ch0: mean 2.5, biased var 1.25, unbiased 5/3. ch1: mean 1, biased var 3, unbiased 4.
  const float a = 1.5f / std::sqrt(1.25f), c = 0.5f / std::sqrt(1.25f), d = 1.f / std::sqrt(3.f);
  check_close(y, {-a, -c, -d, -d, c, a, -d, 3 * d}, 1e-5f);
  check_close(rm, {0.9f * 0 + 0.1f * 2.5f, 0.9f * 1 + 0.1f * 1});
  check_close(rv, {0.9f * 1 + 0.1f * 5.f / 3.f, 0.9f * 2 + 0.1f * 4.f});
  // Without running stats: same output, nothing to update.
  check_close(batch_norm2d(x, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1f, 0.f), y);
}

TEST_CASE("batch_norm2d: matches a double-precision reference, train and eval, 4-d and 2-d") {
  for (Shape s : {Shape{3, 4, 2, 5}, Shape{6, 3}}) {
    CAPTURE(s);
    const int64_t B = s[0], C = s[1], HW = s.numel() / (B * C);
    Tensor x = add(mul(randn_leaf(s, 20, false), 2.f), 1.f);
    Tensor w = randn_leaf({C}, 21, false), b = randn_leaf({C}, 22, false);
    Tensor rm = randn_leaf({C}, 23, false), rv = uniform_leaf({C}, 0.5f, 2.f, 24, false);
    std::vector<float> rm0 = to_vector(rm), rv0 = to_vector(rv);
    std::vector<float> y_train(x.numel()), y_eval(x.numel()), rm1(C), rv1(C);
    for (int64_t c = 0; c < C; ++c) {
      double m = 0, v = 0;
      for (int64_t bb = 0; bb < B; ++bb)
        for (int64_t j = 0; j < HW; ++j) m += x.data()[(bb * C + c) * HW + j];
      m /= B * HW;
      for (int64_t bb = 0; bb < B; ++bb)
        for (int64_t j = 0; j < HW; ++j) v += std::pow(x.data()[(bb * C + c) * HW + j] - m, 2);
      rm1[c] = static_cast<float>(0.7 * rm0[c] + 0.3 * m);
      rv1[c] = static_cast<float>(0.7 * rv0[c] + 0.3 * v / (B * HW - 1));
      v /= B * HW;
      for (int64_t bb = 0; bb < B; ++bb)
        for (int64_t j = 0; j < HW; ++j) {
          int64_t k = (bb * C + c) * HW + j;
          y_train[k] = static_cast<float>((x.data()[k] - m) / std::sqrt(v + 1e-5) * w.data()[c] + b.data()[c]);
          y_eval[k] = static_cast<float>((x.data()[k] - rm0[c]) / std::sqrt(rv0[c] + 1e-5) * w.data()[c] +
                                         b.data()[c]);
        }
    }
    check_close(batch_norm2d(x, w, b, rm, rv, false, 0.3f), y_eval, 1e-5f, 1e-5f);
    check_close(rm, rm0);  // eval leaves the running stats alone
    check_close(rv, rv0);
    check_close(batch_norm2d(x, w, b, rm, rv, true, 0.3f), y_train, 1e-5f, 1e-5f);
    check_close(rm, rm1, 1e-6f, 1e-5f);
    check_close(rv, rv1, 1e-6f, 1e-5f);
  }
}

TEST_CASE("batch_norm2d: gradcheck in training and eval, with and without weight/bias") {
  for (bool training : {true, false}) {
    for (Shape s : {Shape{3, 2, 2, 2}, Shape{2, 3, 1, 1}, Shape{4, 3}, Shape{1, 2, 3, 1}}) {
      CAPTURE(training);
      CAPTURE(s);
      const int64_t C = s[1];
      Tensor x = randn_leaf(s, 30), w = uniform_leaf({C}, 0.5f, 1.5f, 31), b = randn_leaf({C}, 32);
      Tensor rm = randn_leaf({C}, 33, false), rv = uniform_leaf({C}, 0.5f, 2.f, 34, false);
      auto bn = [&](const Inputs& v) { return batch_norm2d(v[0], v[1], v[2], rm, rv, training); };
      CHECK_GRADCHECK(bn, Inputs{x, w, b});
      CHECK_GRADCHECK(bn, Inputs{x, Tensor(), Tensor()});
      CHECK_GRADCHECK(bn, Inputs{x, Tensor(), b});
    }
  }
}

TEST_CASE("batch_norm2d: eval backward is the per-channel affine map") {
  Tensor x = randn_leaf({2, 2, 1, 3}, 40);
  Tensor w = from_vector({2, -1}), rm = from_vector({0.5f, -1}), rv = from_vector({3, 0});
  batch_norm2d(x, w, Tensor(), rm, rv, false, 0.1f, 1.f).backward(ones({2, 2, 1, 3}));
  check_close(x.grad(), {1, 1, 1, -1, -1, -1, 1, 1, 1, -1, -1, -1}, 1e-6f);  // w / sqrt(rv + 1)
}

TEST_CASE("batch_norm2d: errors") {
  Tensor x = zeros({2, 3, 2, 2});
  CHECK_THROWS_WITH_AS(batch_norm2d(x, zeros({2}), Tensor(), Tensor(), Tensor(), true),
                       "batch_norm2d: weight of shape (2) for input of shape (2, 3, 2, 2) (expected (3))",
                       Error);
  CHECK_THROWS_WITH_AS(batch_norm2d(x, Tensor(), Tensor(), Tensor(), Tensor(), false),
                       "batch_norm2d: running_mean and running_var are required in eval mode", Error);
  CHECK_THROWS_AS(batch_norm2d(x, Tensor(), Tensor(), zeros({3}), zeros({4}), true), Error);
  CHECK_THROWS_AS(batch_norm2d(x, Tensor(), Tensor(), zeros({3}), Tensor(), true), Error);
  CHECK_THROWS_WITH_AS(batch_norm2d(zeros({1, 3}), Tensor(), Tensor(), Tensor(), Tensor(), true),
                       "batch_norm2d: expected more than 1 value per channel when training, got input "
                       "of shape (1, 3)", Error);
  CHECK_THROWS_AS(batch_norm2d(zeros({3}), Tensor(), Tensor(), Tensor(), Tensor(), true), Error);
}

// ---- normalize --------------------------------------------------------------------

TEST_CASE("normalize: hand-computed values") {
  Tensor x = from_vector({3, 4, 0, 0, -1, 1}, {3, 2});
  const float r = 1.f / std::sqrt(2.f);
  check_close(normalize(x, 2.f, 1), {0.6f, 0.8f, 0, 0, -r, r});
  check_close(normalize(x, 1.f, 1), {3.f / 7, 4.f / 7, 0, 0, -0.5f, 0.5f});
  // Along dim 0: columns (3, 0, -1) and (4, 0, 1).
  const float s10 = std::sqrt(10.f), s17 = std::sqrt(17.f);
  check_close(normalize(x, 2.f, 0), {3 / s10, 4 / s17, 0, 0, -1 / s10, 1 / s17});
  check_close(normalize(x, 1.f, 0), {0.75f, 0.8f, 0, 0, -0.25f, 0.2f});
  // ‖x‖ below eps: divide by eps instead.
  check_close(normalize(from_vector({1e-3f, -2e-3f}), 2.f, 0, 0.1f), {1e-2f, -2e-2f});
}

TEST_CASE("normalize: at the eps boundary (norm == eps) the gradient is the unclamped one, as in PyTorch") {
  // y = x / max(n, eps). At n = eps the code (like clamp_min's gradient in PyTorch) takes the
  // unclamped branch: dx = (g − ∂n/∂x · s) / n with s = Σ g·y; just above the boundary
  // (eps > n) the clamped branch: dx = g / eps.
  auto grad = [](std::vector<float> xs, float p, float eps) {
    Tensor x = from_vector(xs, {2}).requires_grad_(true);
    sum(mul(normalize(x, p, 0, eps), from_vector({1.f, 2.f}, {2}))).backward();
    return std::vector<float>(x.grad().data(), x.grad().data() + 2);
  };
  // ℓ1, x = (0.25, 0.75): n = 1, y = x, s = 1.75, ∂n/∂x = sign(x) -> (−0.75, 0.25).
  std::vector<float> l1 = grad({0.25f, 0.75f}, 1.f, 1.f);
  CHECK(l1[0] == doctest::Approx(-0.75f));
  CHECK(l1[1] == doctest::Approx(0.25f));
  // ℓ2, x = (0.6, 0.8): n = 1, y = x, s = 2.2, ∂n/∂x = y -> (1 − 1.32, 2 − 1.76).
  std::vector<float> l2 = grad({0.6f, 0.8f}, 2.f, 1.f);
  CHECK(l2[0] == doctest::Approx(-0.32f));
  CHECK(l2[1] == doctest::Approx(0.24f));
  // eps just above n: clamped, dx = g / eps.
  std::vector<float> clamped = grad({0.6f, 0.8f}, 2.f, 1.0001f);
  CHECK(clamped[0] == doctest::Approx(1.f / 1.0001f));
  CHECK(clamped[1] == doctest::Approx(2.f / 1.0001f));
}

TEST_CASE("normalize: matches a double-precision reference along every dim") {
  Tensor x = randn_leaf({3, 4, 70}, 50, false);
  for (int p : {1, 2})
    for (int dim : {0, 1, 2, -1, -2}) {
      CAPTURE(p);
      CAPTURE(dim);
      check_close(normalize(x, float(p), dim), ref_normalize(x, p, dim < 0 ? dim + 3 : dim, 1e-12),
                  1e-6f, 1e-5f);
    }
  // (3, 8, 1001) along dim 1: 3003 interleaved lanes, split across threads mid-slab.
  Tensor big = randn_leaf({3, 8, 1001}, 52, false);
  big.requires_grad_();
  Tensor g = randn_leaf({3, 8, 1001}, 53, false);
  for (int p : {1, 2}) {
    CAPTURE(p);
    std::vector<float> y = ref_normalize(big, p, 1, 1e-12);
    big.zero_grad();
    Tensor out = normalize(big, float(p), 1);
    check_close(out, y, 1e-6f, 1e-5f);
    // Backward against docs/derivations.md §6 evaluated in double: dx = (g − t·s)/n.
    out.backward(g);
    std::vector<float> expect(big.numel());
    for (int64_t o = 0; o < 3; ++o)
      for (int64_t i = 0; i < 1001; ++i) {
        auto at = [&](int64_t k) { return (o * 8 + k) * 1001 + i; };
        double n = 0, s = 0;
        for (int64_t k = 0; k < 8; ++k) {
          const double v = big.data()[at(k)];
          n += p == 1 ? std::fabs(v) : v * v;
          s += g.data()[at(k)] * y[at(k)];
        }
        if (p == 2) n = std::sqrt(n);
        for (int64_t k = 0; k < 8; ++k) {
          const double v = big.data()[at(k)], t = p == 1 ? (v > 0) - (v < 0) : y[at(k)];
          expect[at(k)] = static_cast<float>((g.data()[at(k)] - t * s) / n);
        }
      }
    check_close(big.grad(), expect, 1e-5f, 1e-4f);
  }
}

TEST_CASE("normalize: gradcheck, p = 1 and 2, dims 0/1/-1, size-1 dims") {
  const Shape shapes[] = {{3, 4, 5}, {2, 1, 3}, {1, 4}};
  for (const Shape& s : shapes)
    for (int p : {1, 2})
      for (int dim : {0, 1, -1}) {
        CAPTURE(s);
        CAPTURE(p);
        CAPTURE(dim);
        Tensor x = away_from_zero_leaf(s, 0.2f, 2.f, 51);  // away from |x| kinks for p = 1
        CHECK_GRADCHECK([=](const Inputs& v) { return normalize(v[0], float(p), dim); }, Inputs{x});
      }
}

TEST_CASE("normalize: gradcheck through both branches of the eps clamp") {
  // (4, 3) normalised along dim 0: column 1 is tiny (‖x‖ < eps = 0.1, clamped), the others not.
  Tensor x = from_vector({1.0f, 1e-3f, -0.8f, -0.5f, -2e-3f, 1.2f, 0.7f, 1.5e-3f, 0.6f, 1.3f, 1e-3f, -0.9f},
                         {4, 3});
  x.requires_grad_();
  GradcheckOptions opt;
  opt.eps = 1e-3;  // keeps column 1 below eps while perturbed
  opt.atol = 5e-3;
  for (int p : {1, 2}) {
    CAPTURE(p);
    auto r = gradcheck([p](const Inputs& v) { return normalize(v[0], float(p), 0, 0.1f); }, {x}, opt);
    INFO(r.message);
    CHECK(r.ok);
    // The clamped column by hand: dx = g / eps.
    x.zero_grad();
    normalize(x, float(p), 0, 0.1f).backward(ones({4, 3}));
    for (int k = 0; k < 4; ++k) CHECK(x.grad().at({k, 1}) == doctest::Approx(10.f).epsilon(1e-5));
  }
}

TEST_CASE("normalize: l1 backward uses sign(0) = 0") {
  // x = [0, 2, -2], n = 4, y = [0, .5, -.5], g = [1, 2, 3]: s = Σ g·y = -0.5,
  // dx = (g − sign(x)·s)/n = [1/4, 2.5/4, 2.5/4].
  Tensor x = from_vector({0, 2, -2});
  x.requires_grad_();
  normalize(x, 1.f, 0).backward(from_vector({1, 2, 3}));
  check_close(x.grad(), {0.25f, 0.625f, 0.625f});
  // l2 on the same: n = √8, dx = (g − y·s)/n with y = x/√8, s = (2·2 − 3·2)/√8.
  x.zero_grad();
  normalize(x, 2.f, 0).backward(from_vector({1, 2, 3}));
  const float n = std::sqrt(8.f), s = -2.f / n;
  check_close(x.grad(), {1 / n, (2 - 2 / n * s) / n, (3 + 2 / n * s) / n});
}

TEST_CASE("normalize: errors") {
  Tensor x = zeros({2, 3});
  CHECK_THROWS_WITH_AS(normalize(x, 3.f, 1), "normalize: p must be 1 or 2, got 3", Error);
  CHECK_THROWS_WITH_AS(normalize(x, 2.f, 2), "normalize: dim 2 out of range for a 2-d tensor", Error);
  CHECK_THROWS_AS(normalize(x, 2.f, -3), Error);
}
