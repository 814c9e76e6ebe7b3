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

TEST_CASE("erf_fast: absolute error below 5e-7, odd, saturates") {
  double worst = 0;
  for (float x = -6.f; x <= 6.f; x += 0.001f)
    worst = std::max(worst, std::fabs(erf_fast(x) - std::erf(static_cast<double>(x))));
  INFO("worst absolute error " << worst);
  CHECK(worst < 5e-7);
  CHECK(erf_fast(0.f) == 0.f);
  CHECK(erf_fast(10.f) == 1.f);
  CHECK(erf_fast(-10.f) == -1.f);
  CHECK(erf_fast(-0.7f) == -erf_fast(0.7f));
}
