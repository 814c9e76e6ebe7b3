// Shared test helpers: gradcheck as a doctest assertion (of a function or of a whole
// module), closeness checks, random inputs, and the fused-vs-composed comparison.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/gradcheck.h"
#include "core/ops.h"
#include "nn/module.h"

namespace sima::testing {

// CHECK_GRADCHECK(fn, inputs[, options]) — fails with the first mismatching element.
// (Variadic so that a lambda with several captures, whose commas split macro
// arguments, can be passed directly.)
#define CHECK_GRADCHECK(...)                                              \
  do {                                                                    \
    auto _r = ::sima::gradcheck(__VA_ARGS__);                             \
    INFO("gradcheck: " << _r.message << " (checked " << _r.checked << ")"); \
    CHECK(_r.ok);                                                         \
    CHECK(_r.checked > 0);                                                \
  } while (0)

// A leaf of the given shape with values uniform in [lo, hi) from a seeded generator.
inline Tensor uniform_leaf(const Shape& s, float lo, float hi, uint64_t seed, bool grad = true) {
  Generator g(seed);
  Tensor t = empty(s);
  g.fill_uniform(t.data(), t.numel(), lo, hi);
  t.requires_grad_(grad);
  return t;
}
inline Tensor randn_leaf(const Shape& s, uint64_t seed, bool grad = true) {
  Generator g(seed);
  Tensor t = randn(s, g);
  t.requires_grad_(grad);
  return t;
}
// Values in ±[lo, hi): keeps inputs away from kinks (0 for relu/abs) by at least lo.
inline Tensor away_from_zero_leaf(const Shape& s, float lo, float hi, uint64_t seed) {
  Generator g(seed);
  Tensor t = empty(s);
  for (int64_t i = 0; i < t.numel(); ++i) {
    float m = lo + (hi - lo) * g.uniform();
    t.data()[i] = g.uniform() < 0.5f ? -m : m;
  }
  t.requires_grad_(true);
  return t;
}

// |a - b|, but a NaN against a number is infinitely far (and NaN against NaN the same value):
// std::fmax and std::max drop a NaN, so a maximum of plain |a - b| would pass a NaN result.
inline float abs_diff(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0.f : INFINITY;
  return std::fabs(a - b);
}

// Max abs_diff over all elements; shapes must match.
inline float max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  float m = 0.f;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::fmax(m, abs_diff(a.data()[i], b.data()[i]));
  return m;
}

// CHECK that every element agrees with `expected` to atol + rtol·|expected|.
inline void check_close(const Tensor& got, const std::vector<float>& expected, float atol = 1e-5f,
                        float rtol = 1e-5f) {
  REQUIRE(got.numel() == static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) {
    INFO("element " << i << ": got " << got.data()[i] << ", expected " << expected[i]);
    CHECK(std::fabs(got.data()[i] - expected[i]) <= atol + rtol * std::fabs(expected[i]));
  }
}
inline void check_close(const Tensor& got, const Tensor& expected, float atol = 1e-5f,
                        float rtol = 1e-5f) {
  REQUIRE(got.shape() == expected.shape());
  check_close(got, to_vector(expected), atol, rtol);
}


// Max |got − expected| / max |expected|: the error relative to the scale of the expected tensor.
inline float rel_error(const Tensor& got, const Tensor& expected) {
  REQUIRE(got.shape() == expected.shape());
  float scale = 0.f;
  for (int64_t i = 0; i < expected.numel(); ++i) scale = std::fmax(scale, std::fabs(expected.data()[i]));
  return max_abs_diff(got, expected) / std::fmax(scale, 1e-30f);
}

// ‖got − expected‖₂ / ‖expected‖₂ over all elements, in double: the error of a whole tensor
// (a reduced-precision result against float32).
inline double rel_l2_error(const Tensor& got, const Tensor& expected) {
  REQUIRE(got.shape() == expected.shape());
  double num = 0, den = 0;
  for (int64_t i = 0; i < expected.numel(); ++i) {
    const double d = double(got.data()[i]) - expected.data()[i];
    num += d * d;
    den += double(expected.data()[i]) * expected.data()[i];
  }
  return std::sqrt(num / den);
}

inline bool all_finite(const Tensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isfinite(t.data()[i])) return false;
  return true;
}

// Fresh leaf copies of `inputs`: same values, same requires_grad; undefined stays undefined.
inline std::vector<Tensor> leaf_copies(const std::vector<Tensor>& inputs) {
  std::vector<Tensor> c;
  for (const Tensor& t : inputs) {
    if (!t.defined()) {
      c.push_back(Tensor());
      continue;
    }
    Tensor d = t.detach().clone();
    d.requires_grad_(t.requires_grad());
    c.push_back(d);
  }
  return c;
}

// How closely check_same wants a result to match the oracle's.
struct Tolerance {
  // Elementwise (the default): |got − expected| <= atol + rtol·|expected| at every element.
  float atol = 1e-5f;
  float rtol = 1e-4f;
  // When > 0, relative to the expected tensor's scale instead: rel_error(got, expected) <= rel.
  float rel = 0.f;
};

inline void check_within(const Tensor& got, const Tensor& expected, const Tolerance& tol) {
  REQUIRE(got.shape() == expected.shape());
  if (tol.rel > 0.f) CHECK(rel_error(got, expected) <= tol.rel);
  else check_close(got, expected, tol.atol, tol.rtol);
}

using TensorFn = std::function<Tensor(const std::vector<Tensor>&)>;

// `fused` and `composed` (its oracle) must be the same function. Runs each on fresh leaf
// copies of `inputs` (leaf_copies), backward with one random gradient, and checks that the
// outputs and the gradient of every input that requires grad agree to `tol`.
// `params`: leaves both functions use directly (a module's parameters); their gradients are
// compared too. `fused` runs its forward and backward before `composed` starts, so the two
// never share a parameter gradient.
inline void check_same(const TensorFn& fused, const TensorFn& composed, const std::vector<Tensor>& inputs,
                       const Tolerance& tol = {}, const std::vector<Tensor>& params = {}) {
  std::vector<Tensor> a = leaf_copies(inputs), b = leaf_copies(inputs);
  for (const Tensor& p : params) p.zero_grad();
  Tensor ya = fused(a);
  Generator g(77);
  Tensor gy = randn(ya.shape(), g);
  ya.backward(gy);
  std::vector<Tensor> pa;
  for (const Tensor& p : params) {
    REQUIRE(p.grad().defined());
    pa.push_back(p.grad().clone());
    p.zero_grad();
  }
  Tensor yb = composed(b);
  {
    INFO("forward");
    check_within(ya, yb, tol);
  }
  yb.backward(gy);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || !inputs[i].requires_grad()) continue;
    INFO("gradient of input " << i);
    REQUIRE(a[i].grad().defined());
    REQUIRE(b[i].grad().defined());
    check_within(a[i].grad(), b[i].grad(), tol);
  }
  for (size_t i = 0; i < params.size(); ++i) {
    INFO("gradient of parameter " << i);
    REQUIRE(params[i].grad().defined());
    check_within(pa[i], params[i].grad(), tol);
  }
}

// Gradcheck of a module w.r.t. x and every parameter (they alias the checked inputs), every
// element of each. `forward` replaces m.forward(x) where the module needs more (the token
// grid, a dropout mask fixed by reseeding).
inline void gradcheck_module(Module& m, const Tensor& x, const GradcheckOptions& opt = {},
                             const std::function<Tensor(const Tensor&)>& forward = {}) {
  std::vector<Tensor> inputs{x};
  std::string names = "x";
  for (auto& [name, p] : m.named_parameters()) {
    inputs.push_back(p);
    names += " " + name;
  }
  auto r = gradcheck(
      [&](const std::vector<Tensor>& in) { return forward ? forward(in[0]) : m.forward(in[0]); }, inputs, opt);
  INFO("inputs: " << names << " | gradcheck: " << r.message << " (checked " << r.checked << ")");
  CHECK(r.ok);
  CHECK(r.checked > 0);
  int64_t expected = 0;
  for (const Tensor& t : inputs) expected += t.numel();
  CHECK(r.checked == expected);
}

// The message of the sima::Error that f throws, or "(no error)".
inline std::string error_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Every parameter of m drawn from N(0, std²), seeded.
inline void randomize_parameters(Module& m, uint64_t seed, float std = 0.3f) {
  Generator g(seed);
  for (auto& [name, p] : m.named_parameters()) g.fill_normal(p.data(), p.numel(), 0.f, std);
}

}  // namespace sima::testing
