// The vectorisable exp/erf behind exp, softmax, gelu, sigmoid: accuracy against libm
// over the whole float range, and the special values.
#include "testing.h"

#include <limits>

#include "core/ops/vmath.h"

using namespace sima;

TEST_CASE("exp_fast: within 2 ulp-ish of std::exp over [-87, 88.7]") {
  double worst = 0;
  for (float x = -87.f; x <= 88.7f; x += 0.0137f) {
    double ref = std::exp(static_cast<double>(x));
    double rel = std::fabs(exp_fast(x) - ref) / ref;
    worst = std::max(worst, rel);
  }
  INFO("worst relative error " << worst);
  CHECK(worst < 3e-7);
  CHECK(exp_fast(0.f) == 1.f);
  CHECK(exp_fast(-100.f) == 0.f);
  CHECK(exp_fast(-std::numeric_limits<float>::infinity()) == 0.f);
  CHECK(std::isinf(exp_fast(89.f)));
  CHECK(std::isinf(exp_fast(std::numeric_limits<float>::infinity())));
  CHECK(std::isnan(exp_fast(NAN)));
  // The top of the range (k = 128) must not overflow the exponent field.
  CHECK(exp_fast(88.7f) == doctest::Approx(std::exp(double(88.7f))).epsilon(1e-6));
}

TEST_CASE("erf_fast: absolute error below 5.5e-7 against double erf, odd, saturates") {
  double worst = 0;  // dense: every 1e-4 over [-6, 6]
  for (float x = -6.f; x <= 6.f; x += 1e-4f)
    worst = std::max(worst, std::fabs(erf_fast(x) - std::erf(static_cast<double>(x))));
  INFO("worst absolute error " << worst);
  CHECK(worst < 5.5e-7);  // 5.25e-7 measured (A&S 7.1.26's 1.5e-7, plus float rounding)
  CHECK(erf_fast(0.f) == 0.f);
  CHECK(erf_fast(10.f) == 1.f);
  CHECK(erf_fast(-10.f) == -1.f);
  CHECK(erf_fast(-0.7f) == -erf_fast(0.7f));
}

TEST_CASE("exp_nonpos_fast: within 3e-7 relative of std::exp over [-87, 0], tiny below") {
  double worst = 0;
  for (float x = -87.f; x <= 0.f; x += 0.00731f) {
    double ref = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::fabs(exp_nonpos_fast(x) - ref) / ref);
  }
  INFO("worst relative error " << worst);
  CHECK(worst < 3e-7);
  CHECK(exp_nonpos_fast(0.f) == 1.f);
  CHECK(exp_nonpos_fast(-100.f) <= 2e-38f);  // clamped: FLT_MIN·e^r, not 0
  CHECK(exp_nonpos_fast(-std::numeric_limits<float>::infinity()) <= 2e-38f);
}

// GELU's derivative takes the Gaussian from erf_fast(x, gauss): it must be e^(−x²) itself.
// Against e^(−fl(x²)): the rounding of x² itself (relative 6e-8·x²) is not the exp's error.
TEST_CASE("erf_fast(x, gauss): gauss = e^(-x^2) within 3e-7 relative; NaN stays NaN") {
  double worst = 0;
  for (float x = -9.f; x <= 9.f; x += 0.0011f) {
    float g;
    erf_fast(x, g);
    double ref = std::exp(-static_cast<double>(x * x));
    worst = std::max(worst, std::fabs(g - ref) / std::max(ref, 1e-30));
  }
  INFO("worst relative error " << worst);
  CHECK(worst < 3e-7);
  CHECK(std::isnan(erf_fast(NAN)));
  CHECK(erf_fast(std::numeric_limits<float>::infinity()) == 1.f);
  CHECK(erf_fast(-std::numeric_limits<float>::infinity()) == -1.f);
}
