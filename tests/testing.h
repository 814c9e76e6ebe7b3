// Shared test helpers: gradcheck as a doctest assertion, closeness checks, random inputs.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "core/gradcheck.h"
#include "core/ops.h"

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

// Max |a - b| over all elements; shapes must match.
inline float max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  float m = 0.f;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::fmax(m, std::fabs(a.data()[i] - b.data()[i]));
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

}  // namespace sima::testing
