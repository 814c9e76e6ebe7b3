// Activations: values from closed forms / published constants, gradchecks away
// from the kinks, and the PyTorch conventions at the kinks.
#include "testing.h"

using namespace sima;
using namespace sima::testing;

TEST_CASE("activations: forward values") {
  Tensor x = from_vector({-3.f, -1.f, 0.f, 0.5f, 2.f, 7.f});
  check_close(relu(x), {0, 0, 0, 0.5f, 2, 7});
  check_close(relu6(x), {0, 0, 0, 0.5f, 2, 6});
  // gelu(x) = x·Φ(x); Φ(-3)=0.0013499, Φ(-1)=0.15865525, Φ(.5)=0.69146246, Φ(2)=0.97724987
  check_close(gelu(x), {-3.f * 0.0013498980f, -0.15865525f, 0.f, 0.5f * 0.69146246f,
                        2.f * 0.97724987f, 7.f}, 1e-5f, 1e-5f);
  // quick_gelu(1) = 1/(1+e^-1.702)
  check_close(quick_gelu(from_vector({1.f, 0.f})), {1.f / (1.f + std::exp(-1.702f)), 0.f});
  check_close(elu(from_vector({-1.f, 0.f, 2.f})), {std::exp(-1.f) - 1.f, 0.f, 2.f});
  check_close(elu(from_vector({-1.f}), 0.5f), {0.5f * (std::exp(-1.f) - 1.f)});
  check_close(softplus(from_vector({0.f, 1.f, 30.f})), {std::log(2.f), std::log1p(std::exp(1.f)), 30.f});
  // beta = 2: log(1 + e^2)/2; past the threshold (2·15 > 20) linear.
  check_close(softplus(from_vector({1.f, 15.f}), 2.f), {std::log1p(std::exp(2.f)) / 2.f, 15.f});
  check_close(sigmoid(from_vector({0.f, 2.f})), {0.5f, 0.88079708f});
  check_close(tanh(from_vector({0.f, 1.f})), {0.f, 0.76159416f});
  // Saturation stays finite.
  CHECK(sigmoid(from_vector({-100.f})).item() == doctest::Approx(0.f));
  CHECK(std::isfinite(softplus(from_vector({100.f})).item()));
}

TEST_CASE("activations: gradcheck") {
  // Away from 0 and 6 so the central difference never straddles a kink.
  Tensor x = away_from_zero_leaf({3, 5}, 0.1f, 3.f, 11);
  Tensor big = uniform_leaf({2, 4}, 5.2f, 6.8f, 12);  // around relu6's upper kink
  for (int i = 0; i < big.numel(); ++i)
    if (std::fabs(big.data()[i] - 6.f) < 0.1f) big.data()[i] = 6.3f;
  using Fn = Tensor (*)(const Tensor&);
  struct Case { const char* name; Fn fn; };
  const Case cases[] = {
      {"relu", [](const Tensor& t) { return relu(t); }},
      {"relu6", [](const Tensor& t) { return relu6(t); }},
      {"gelu", [](const Tensor& t) { return gelu(t); }},
      {"quick_gelu", [](const Tensor& t) { return quick_gelu(t); }},
      {"elu", [](const Tensor& t) { return elu(t, 0.7f); }},
      {"softplus", [](const Tensor& t) { return softplus(t); }},
      {"softplus_beta", [](const Tensor& t) { return softplus(t, 3.f, 5.f); }},
      {"sigmoid", [](const Tensor& t) { return sigmoid(t); }},
      {"tanh", [](const Tensor& t) { return tanh(t); }},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    CHECK_GRADCHECK([&](const std::vector<Tensor>& v) { return c.fn(v[0]); }, std::vector<Tensor>{x});
    CHECK_GRADCHECK([&](const std::vector<Tensor>& v) { return c.fn(v[0]); }, std::vector<Tensor>{big});
  }
}

TEST_CASE("activations: derivative conventions at the kinks (as PyTorch)") {
  Tensor x = from_vector({0.f, 6.f});
  x.requires_grad_();
  relu(x).backward(ones({2}));
  check_close(x.grad(), {0.f, 1.f});  // relu'(0) = 0
  x.zero_grad();
  relu6(x).backward(ones({2}));
  check_close(x.grad(), {0.f, 0.f});  // relu6' is 0 at both ends
  x.zero_grad();
  gelu(x).backward(ones({2}));
  CHECK(x.grad().data()[0] == doctest::Approx(0.5f));  // gelu'(0) = Φ(0) = 1/2
}

// gelu and gelu' against their double-precision closed forms every 1e-3 over [-8, 8]
// (the backward shares erf's Gaussian with φ: a wrong Gaussian shows here).
TEST_CASE("gelu: forward and derivative within 1e-6 of double precision") {
  std::vector<float> xs;
  for (float v = -8.f; v <= 8.f; v += 1e-3f) xs.push_back(v);
  Tensor x = from_vector(xs);
  x.requires_grad_();
  Tensor y = gelu(x);
  y.backward(ones({int64_t(xs.size())}));
  double worst_y = 0, worst_dy = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double v = xs[i], cdf = 0.5 * (1 + std::erf(v / std::sqrt(2.0)));
    const double dref = cdf + v * std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI);
    worst_y = std::max(worst_y, std::fabs(y.data()[i] - v * cdf));
    worst_dy = std::max(worst_dy, std::fabs(x.grad().data()[i] - dref));
  }
  INFO("worst |gelu - ref| " << worst_y << ", worst |gelu' - ref| " << worst_dy);
  CHECK(worst_y < 1e-6);
  CHECK(worst_dy < 1e-6);
}
