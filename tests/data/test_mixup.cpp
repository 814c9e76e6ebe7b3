// Mixup / CutMix: exact smoothed targets, mixed images against the formulas, the CutMix box
// against the corrected λ, the λ distribution (Beta moments), the switch frequency, errors.
#include <cmath>

#include "data/mixup.h"
#include "testing.h"

using namespace sima;
using namespace sima::testing;

namespace {

// (B, C, H, W) with every value of sample b equal to b + 1.
Tensor sample_index_images(int64_t B, int64_t C, int64_t H, int64_t W) {
  Tensor t = empty(Shape{B, C, H, W});
  const int64_t per = C * H * W;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t k = 0; k < per; ++k) t.data()[b * per + k] = static_cast<float>(b + 1);
  return t;
}

}  // namespace

TEST_CASE("mixup_target: smoothed one-hot of y and y.flip(0), exact values") {
  // C = 4, ε = 0.1: off = 0.025, on = 0.925; λ = 0.7
  const Tensor t = mixup_target({0, 1, 2}, 4, 0.7, 0.1);
  REQUIRE(t.shape() == Shape({3, 4}));
  // row 0: y = 0, flipped y = 2; row 1: y = 1 both; row 2: y = 2, flipped 0
  check_close(t, {0.655f, 0.025f, 0.295f, 0.025f,  //
                  0.025f, 0.925f, 0.025f, 0.025f,  //
                  0.295f, 0.025f, 0.655f, 0.025f},
              1e-7f, 0.f);
  // λ = 1, no smoothing: the one-hot labels
  check_close(mixup_target({3, 0}, 4, 1.0, 0.0), {0, 0, 0, 1, 1, 0, 0, 0}, 0.f, 0.f);
  CHECK_THROWS_WITH_AS(mixup_target({4}, 4, 1.0, 0.1), "mixup_target: label 4 of sample 0 is not in [0, 4)", Error);
  CHECK_THROWS_WITH_AS(mixup_target({0}, 4, 1.0, 1.0), "mixup_target: label_smoothing 1 is not in [0, 1)", Error);
}

TEST_CASE("sample_beta has the Beta moments") {
  Generator g(1);
  for (auto [a_, b_] : {std::pair<double, double>{0.8, 0.8}, {1.0, 1.0}, {2.0, 5.0}, {0.3, 0.3}}) {
    const auto& a = a_; const auto& b = b_;  // clang 14 cannot capture a structured binding
    const int n = 20000;
    double s = 0, s2 = 0;
    for (int i = 0; i < n; ++i) {
      const double x = sample_beta(a, b, g);
      REQUIRE(x >= 0.0);
      REQUIRE(x <= 1.0);
      s += x;
      s2 += x * x;
    }
    const double mean = s / n, var = s2 / n - mean * mean;
    const double true_mean = a / (a + b), true_var = a * b / ((a + b) * (a + b) * (a + b + 1));
    INFO("Beta(" << a << ", " << b << "): mean " << mean << " var " << var);
    CHECK(std::fabs(mean - true_mean) < 0.01);
    CHECK(std::fabs(var - true_var) < 0.01);
  }
  CHECK_THROWS_WITH_AS(sample_beta(0.0, 1.0, g), "sample_beta: parameters (0, 1) must be positive", Error);
}

TEST_CASE("mixup: images λ·x + (1 − λ)·x.flip(0), targets rows sum to 1, λ ~ Beta(0.8, 0.8)") {
  const Mixup mix({.mixup_alpha = 0.8, .cutmix_alpha = 0.0, .num_classes = 5});
  Generator g(2);
  const Tensor x = sample_index_images(4, 2, 3, 3);
  double s = 0, s2 = 0;
  const int n = 4000;
  for (int i = 0; i < n; ++i) {
    const MixupResult r = mix(x, {0, 1, 2, 4}, g);
    CHECK(!r.cutmix);
    const float lam = static_cast<float>(r.lam);
    // sample b (value b + 1) mixed with sample 3 − b (value 4 − b)
    for (int64_t b = 0; b < 4; ++b)
      CHECK(r.images.at({b, 1, 2, 0}) == doctest::Approx(lam * (b + 1) + (1 - lam) * (4 - b)).epsilon(1e-6));
    for (int64_t b = 0; b < 4; ++b) {
      float row = 0.f;
      for (int64_t k = 0; k < 5; ++k) row += r.targets.at({b, k});
      CHECK(row == doctest::Approx(1.f).epsilon(1e-6));
    }
    s += r.lam;
    s2 += r.lam * r.lam;
  }
  const double mean = s / n, var = s2 / n - mean * mean;
  CHECK(mean == doctest::Approx(0.5).epsilon(0.05));
  CHECK(var == doctest::Approx(0.64 / (2.56 * 2.6)).epsilon(0.1));  // ab / ((a + b)²(a + b + 1))
  CHECK(x.at({0, 0, 0, 0}) == 1.f);  // the input is not modified
}

TEST_CASE("cutmix: the pasted box matches the corrected λ; targets use that λ") {
  const int64_t B = 4, C = 3, H = 10, W = 12;
  const Mixup mix({.mixup_alpha = 0.0, .cutmix_alpha = 1.0, .label_smoothing = 0.0, .num_classes = 4});
  Generator g(3);
  const Tensor x = sample_index_images(B, C, H, W);
  for (int i = 0; i < 500; ++i) {
    const MixupResult r = mix(x, {0, 1, 2, 3}, g);
    REQUIRE(r.cutmix);
    const CutmixBox& bx = r.box;
    REQUIRE(0 <= bx.y0);
    REQUIRE(bx.y0 <= bx.y1);
    REQUIRE(bx.y1 <= H);
    REQUIRE(0 <= bx.x0);
    REQUIRE(bx.x0 <= bx.x1);
    REQUIRE(bx.x1 <= W);
    for (int64_t b = 0; b < B; ++b) {
      int64_t pasted = 0;
      for (int64_t c = 0; c < C; ++c)
        for (int64_t y = 0; y < H; ++y)
          for (int64_t xx = 0; xx < W; ++xx) {
            const float v = r.images.at({b, c, y, xx});
            const bool in_box = y >= bx.y0 && y < bx.y1 && xx >= bx.x0 && xx < bx.x1;
            CHECK(v == (in_box ? float(B - b) : float(b + 1)));
            pasted += v == float(B - b) && B - b != b + 1;
          }
      // fraction of pixels from the flipped sample = 1 − λ
      CHECK(double(pasted) / (C * H * W) == doctest::Approx(1.0 - r.lam));
      // no smoothing: target λ on y, 1 − λ on the flipped label
      CHECK(r.targets.at({b, b}) == doctest::Approx(r.lam));
      CHECK(r.targets.at({b, B - 1 - b}) == doctest::Approx(1.0 - r.lam));
    }
  }
}

TEST_CASE("rand_bbox follows timm: cut = int(side·√(1 − λ)), centred, clipped") {
  Generator g(4);
  for (int i = 0; i < 300; ++i) {
    const double lam = g.uniform_double();
    const CutmixBox b = rand_bbox(20, 30, lam, g);
    const int64_t cut_h = int64_t(20 * std::sqrt(1 - lam)), cut_w = int64_t(30 * std::sqrt(1 - lam));
    CHECK(b.y1 - b.y0 <= 2 * (cut_h / 2));
    CHECK(b.x1 - b.x0 <= 2 * (cut_w / 2));
    if (b.y0 > 0 && b.y1 < 20) CHECK(b.y1 - b.y0 == 2 * (cut_h / 2));  // not clipped: full size
  }
  const CutmixBox whole = rand_bbox(8, 8, 0.0, g);  // λ = 0: side 8, centre anywhere -> clipped
  CHECK((whole.y1 - whole.y0) * (whole.x1 - whole.x0) > 0);
}

TEST_CASE("both enabled: cutmix about switch_prob of the time; prob 0: nothing mixed, targets smoothed") {
  const Mixup mix({.num_classes = 3});  // DeiT's: 0.8 / 1.0 / prob 1 / switch 0.5 / ε 0.1
  Generator g(5);
  const Tensor x = sample_index_images(2, 1, 4, 4);
  int cut = 0;
  const int n = 4000;
  for (int i = 0; i < n; ++i) cut += mix(x, {0, 2}, g).cutmix;
  CHECK(cut / double(n) == doctest::Approx(0.5).epsilon(0.06));

  const Mixup off({.prob = 0.0, .num_classes = 3});
  const MixupResult r = off(x, {0, 2}, g);
  CHECK(r.lam == 1.0);
  CHECK(max_abs_diff(r.images, x) == 0.f);
  const float eps = 0.1f, o = eps / 3, on = 1 - eps + o;
  check_close(r.targets, {on, o, o, o, o, on}, 1e-7f, 0.f);
}

TEST_CASE("same generator state, same mix") {
  const Mixup mix({.num_classes = 10});
  Generator a(9), b(9);
  const Tensor x = uniform_leaf({4, 3, 5, 5}, 0, 1, 1, false);
  for (int i = 0; i < 10; ++i) {
    const MixupResult r1 = mix(x, {1, 2, 3, 4}, a), r2 = mix(x, {1, 2, 3, 4}, b);
    CHECK(r1.lam == r2.lam);
    CHECK(max_abs_diff(r1.images, r2.images) == 0.f);
  }
}

TEST_CASE("errors name the fault") {
  const Mixup mix({.num_classes = 3});
  Generator g(1);
  CHECK_THROWS_WITH_AS(mix(zeros({3, 1, 2, 2}), {0, 1, 2}, g),
                       doctest::Contains("mixup: batch size 3 must be even"), Error);
  CHECK_THROWS_WITH_AS(mix(zeros({2, 1, 2, 2}), {0}, g), "mixup: 1 labels for a batch of 2", Error);
  CHECK_THROWS_WITH_AS(mix(zeros({2, 1, 2, 2}), {0, 3}, g), "mixup: label 3 of sample 1 is not in [0, 3)", Error);
  CHECK_THROWS_WITH_AS(mix(zeros({2, 4}), {0, 1}, g), "mixup: images must be a (B, C, H, W) tensor, got (2, 4)", Error);
  CHECK_THROWS_WITH_AS(Mixup({.mixup_alpha = -1}), "mixup: alphas (mixup -1, cutmix 1) must be non-negative", Error);
  CHECK_THROWS_WITH_AS(Mixup({.switch_prob = 2}), "mixup: switch_prob 2 is not in [0, 1]", Error);
  CHECK_THROWS_WITH_AS(Mixup({.num_classes = 0}), "mixup: num_classes 0 must be positive", Error);
}
