// Transforms: every op on tiny hand-made images against values worked out by hand, resize
// against core interpolate(), the parameter draws of the random transforms (bounds over many
// draws, the RandomResizedCrop fallback, frequencies), determinism, and the errors.
#include <algorithm>
#include <cmath>
#include <set>

#include "core/ops/interpolate.h"
#include "data/functional.h"
#include "data/random_image.h"
#include "data/transforms.h"
#include "testing.h"

using namespace sima;
using namespace sima::testing;
using namespace sima::transforms;
namespace F = sima::transforms::functional;

namespace {

Image make_image(int64_t c, int64_t h, int64_t w, std::vector<float> values) {
  Image img(c, h, w);
  REQUIRE(values.size() == img.data.size());
  img.data = std::move(values);
  return img;
}

void check_values(const Image& got, const std::vector<float>& expected, float tol = 1e-6f) {
  REQUIRE(got.data.size() == expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    INFO("value " << i << ": got " << got.data[i] << ", expected " << expected[i]);
    CHECK(std::fabs(got.data[i] - expected[i]) <= tol);
  }
}

Generator gen0(0);

}  // namespace

TEST_CASE("hflip, crop, pad and center_crop move pixels as by hand") {
  const Image img = make_image(1, 2, 3, {1, 2, 3, 4, 5, 6});
  check_values(F::hflip(img), {3, 2, 1, 6, 5, 4});
  check_values(F::crop(img, 0, 1, 2, 2), {2, 3, 5, 6});
  check_values(F::crop(img, 1, 2, 2, 2), {6, 0, 0, 0});  // outside the image reads 0
  check_values(F::pad(img, 1, 0, 0, 1, 9.f), {9, 1, 2, 3, 9, 4, 5, 6, 9, 9, 9, 9});

  // (H − h)/2 = 1, (W − w)/2 = 1.5 -> round half to even -> 2
  const Image big = make_image(1, 4, 5, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19});
  check_values(F::center_crop(big, 2, 2), {7, 8, 12, 13});
  // 2.5 -> 2 (half to even)
  const Image wide = make_image(1, 1, 7, {0, 1, 2, 3, 4, 5, 6});
  check_values(F::center_crop(wide, 1, 2), {2, 3});
  // crop larger than the image: zero padded, 1 column left / 2 right, 0 rows top / 1 bottom
  check_values(F::center_crop(img, 3, 6), {0, 1, 2, 3, 0, 0, 0, 4, 5, 6, 0, 0, 0, 0, 0, 0, 0, 0});
  // transforms wrap them
  check_values(horizontal_flip(1.0)(img, gen0), {3, 2, 1, 6, 5, 4});
  check_values(horizontal_flip(0.0)(img, gen0), {1, 2, 3, 4, 5, 6});
  check_values(center_crop(2, 2)(big, gen0), {7, 8, 12, 13});
}

TEST_CASE("normalize, grayscale and to_three_channels") {
  const Image rgb = make_image(3, 1, 2, {1.f, 0.f, 0.5f, 1.f, 0.25f, 0.f});
  check_values(F::normalize(rgb, {0.5f, 0.5f, 0.f}, {0.5f, 0.25f, 2.f}), {1.f, -1.f, 0.f, 2.f, 0.125f, 0.f});
  // l = 0.299 R + 0.587 G + 0.114 B
  const float l0 = 0.299f * 1.f + 0.587f * 0.5f + 0.114f * 0.25f, l1 = 0.587f;
  check_values(F::rgb_to_grayscale(rgb, 1), {l0, l1});
  check_values(F::rgb_to_grayscale(rgb, 3), {l0, l1, l0, l1, l0, l1});
  check_values(random_grayscale(1.0)(rgb, gen0), {l0, l1, l0, l1, l0, l1});
  check_values(grayscale()(rgb, gen0), {l0, l1});
  const Image grey = make_image(1, 1, 2, {0.25f, 0.75f});
  check_values(F::to_three_channels(grey), {0.25f, 0.75f, 0.25f, 0.75f, 0.25f, 0.75f});
  check_values(F::to_three_channels(rgb), rgb.data);
  check_values(normalize({0.25f}, {0.5f})(grey, gen0), {0.f, 1.f});
}

TEST_CASE("solarize, brightness, contrast and saturation follow torchvision's formulas") {
  const Image x = make_image(1, 1, 4, {0.2f, 0.5f, 0.9f, 0.6f});
  check_values(F::solarize(x, 0.5f), {0.2f, 0.5f, 0.1f, 0.4f});  // x >= 0.5 -> 1 − x
  check_values(solarize(0.5f, 1.0)(x, gen0), {0.2f, 0.5f, 0.1f, 0.4f});
  check_values(F::adjust_brightness(x, 1.5f), {0.3f, 0.75f, 1.f, 0.9f});  // clamp(f·x)
  // contrast: mean 0.55, clamp(f·x + (1 − f)·mean)
  check_values(F::adjust_contrast(x, 0.5f), {0.375f, 0.525f, 0.725f, 0.575f});
  check_values(F::adjust_contrast(x, 2.f), {0.f, 0.45f, 1.f, 0.65f});
  // RGB contrast blends with the mean of the grey image
  const Image rgb = make_image(3, 1, 2, {1.f, 0.f, 0.f, 1.f, 0.f, 0.f});  // red, green
  const float mean = (0.299f + 0.587f) / 2.f;
  check_values(F::adjust_contrast(rgb, 0.f), {mean, mean, mean, mean, mean, mean});
  // saturation: blend with the grey image; 1-channel images unchanged
  const Image red = make_image(3, 1, 1, {1.f, 0.f, 0.f});
  check_values(F::adjust_saturation(red, 0.f), {0.299f, 0.299f, 0.299f});
  check_values(F::adjust_saturation(red, 0.5f), {0.6495f, 0.1495f, 0.1495f});
  check_values(F::adjust_saturation(x, 0.f), x.data);
}

TEST_CASE("hue: red shifted by 1/3 is green, by -1/3 blue; greys stay; 0 is the identity") {
  const Image red = make_image(3, 1, 1, {1.f, 0.f, 0.f});
  check_values(F::adjust_hue(red, 1.f / 3.f), {0.f, 1.f, 0.f});
  check_values(F::adjust_hue(red, -1.f / 3.f), {0.f, 0.f, 1.f});
  check_values(F::adjust_hue(red, 0.5f), {0.f, 1.f, 1.f});  // cyan
  // a dark orange (0.8, 0.4, 0) has h = 1/12; +1/12 -> h = 1/6: yellow (0.8, 0.8, 0)
  check_values(F::adjust_hue(make_image(3, 1, 1, {0.8f, 0.4f, 0.f}), 1.f / 12.f), {0.8f, 0.8f, 0.f}, 1e-5f);
  const Image grey = make_image(3, 1, 1, {0.3f, 0.3f, 0.3f});
  check_values(F::adjust_hue(grey, 0.25f), grey.data);
  const Image img = random_image(3, 4, 5, 1);
  check_values(F::adjust_hue(img, 0.f), img.data, 1e-5f);
  // hue shifts compose: +0.2 then −0.2 returns the image
  check_values(F::adjust_hue(F::adjust_hue(img, 0.2f), -0.2f), img.data, 1e-5f);
}

TEST_CASE("gaussian blur of a delta is the normalised kernel; reflect padding at the border") {
  const std::vector<float> k = F::gaussian_kernel1d(3, 1.f);
  const float e = std::exp(-0.5f), s = 1.f + 2.f * e;
  check_values(make_image(1, 1, 3, k), {e / s, 1.f / s, e / s});
  Image delta(1, 5, 5, 0.f);
  delta.at(0, 2, 2) = 1.f;
  const Image out = F::gaussian_blur(delta, 3, 1.f);
  for (int64_t y = 0; y < 5; ++y)
    for (int64_t x = 0; x < 5; ++x) {
      const bool near = std::abs(y - 2) <= 1 && std::abs(x - 2) <= 1;
      const float expected = near ? k[y - 1] * k[x - 1] : 0.f;
      INFO("(" << y << ", " << x << ")");
      CHECK(out.at(0, y, x) == doctest::Approx(expected).epsilon(1e-6));
    }
  // a delta next to the corner: reflect pads index −1 with index 1, so output 0 reads it twice
  Image corner(1, 4, 4, 0.f);
  corner.at(0, 1, 1) = 1.f;
  const Image c = F::gaussian_blur(corner, 3, 1.f);
  CHECK(c.at(0, 0, 0) == doctest::Approx(2 * k[0] * 2 * k[0]));
  CHECK(c.at(0, 0, 1) == doctest::Approx(2 * k[0] * k[1]));
  CHECK(c.at(0, 1, 1) == doctest::Approx(k[1] * k[1]));
  CHECK(c.at(0, 3, 3) == 0.f);
  // a constant image stays constant
  const Image flat = F::gaussian_blur(Image(2, 6, 7, 0.4f), 5, 1.3f);
  for (float v : flat.data) CHECK(v == doctest::Approx(0.4f));
  CHECK_THROWS_WITH_AS(F::gaussian_blur(Image(1, 3, 3, 0.f), 7, 1.f),
                       doctest::Contains("reflect padding 3 (kernel_size 7) must be smaller"), Error);
}

TEST_CASE("resize: constants stay constant, 2x2 -> 4x4 by hand, agrees with core interpolate") {
  for (Interpolation m : {Interpolation::Nearest, Interpolation::Bilinear, Interpolation::Bicubic}) {
    const Image out = F::resize(Image(2, 5, 7, 0.3f), 9, 4, m);
    CHECK(out.height == 9);
    CHECK(out.width == 4);
    for (float v : out.data) CHECK(v == doctest::Approx(0.3f));
  }
  // 1-d bilinear [0, 1] -> [0, .25, .75, 1]; f(y, x) = h[x] + 2·h[y] for input [[0, 1], [2, 3]]
  const Image x = make_image(1, 2, 2, {0, 1, 2, 3});
  const float h[4] = {0.f, 0.25f, 0.75f, 1.f};
  std::vector<float> expected;
  for (int y = 0; y < 4; ++y)
    for (int xx = 0; xx < 4; ++xx) expected.push_back(h[xx] + 2 * h[y]);
  check_values(F::resize(x, 4, 4, Interpolation::Bilinear), expected);
  check_values(F::resize(x, 4, 4, Interpolation::Nearest), {0, 0, 1, 1, 0, 0, 1, 1, 2, 2, 3, 3, 2, 2, 3, 3});

  const Image img = random_image(3, 13, 17, 7);
  const Tensor t = from_vector(img.data, Shape{1, 3, 13, 17});
  const struct {
    Interpolation ours;
    InterpMode core;
  } modes[] = {{Interpolation::Nearest, InterpMode::Nearest},
               {Interpolation::Bilinear, InterpMode::Bilinear},
               {Interpolation::Bicubic, InterpMode::Bicubic}};
  for (auto [ours_, core_] : modes)
    for (auto [oh_, ow_] : {std::pair<int64_t, int64_t>{5, 9}, {24, 40}, {13, 6}}) {
      const auto& ours = ours_; const auto& core = core_;  // clang 14 cannot capture a structured binding
      const auto& oh = oh_; const auto& ow = ow_;
      INFO(interpolation_name(ours) << " to " << oh << "x" << ow);
      std::vector<float> ref = to_vector(interpolate(t, oh, ow, core));
      if (ours == Interpolation::Bicubic)
        for (float& v : ref) v = std::clamp(v, 0.f, 1.f);
      const Image out = F::resize(img, oh, ow, ours);
      REQUIRE(out.data.size() == ref.size());
      // The same taps and sums in the same order; only the compiler's FMA contraction may
      // differ between the two loops (it depends on the CPU -march=native targets): ≤ 1e-6.
      float worst = 0.f;
      for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::abs(out.data[i] - ref[i]));
      CHECK(worst <= 1e-6f);
    }
  // bicubic overshoot is clamped into [0, 1]
  const Image step = make_image(1, 1, 4, {0, 0, 1, 1});
  for (float v : F::resize(step, 1, 13, Interpolation::Bicubic).data) CHECK((v >= 0.f && v <= 1.f));
  // Resize(size): shorter side
  const Image r = resize(3)(Image(1, 6, 10, 0.5f), gen0);
  CHECK(r.height == 3);
  CHECK(r.width == 5);
  const Image r2 = resize(4)(Image(1, 10, 6, 0.5f), gen0);  // 4·10/6 = 6.67 -> 6
  CHECK(r2.height == 6);
  CHECK(r2.width == 4);
  CHECK(resize(2, 3)(x, gen0).width == 3);
}

TEST_CASE("random_resized_crop: boxes inside the image, area and ratio within bounds; the fallback") {
  Generator g(3);
  const int64_t H = 100, W = 80;
  const std::pair<double, double> scale{0.08, 1.0}, ratio{3.0 / 4.0, 4.0 / 3.0};
  int fallbacks = 0;
  for (int i = 0; i < 3000; ++i) {
    const CropBox b = random_resized_crop_params(H, W, scale, ratio, g);
    REQUIRE(b.top >= 0);
    REQUIRE(b.left >= 0);
    REQUIRE(b.height > 0);
    REQUIRE(b.width > 0);
    REQUIRE(b.top + b.height <= H);
    REQUIRE(b.left + b.width <= W);
    if (b.height == H && b.width == W) ++fallbacks;
    // w = round(√(A·r)), h = round(√(A/r)) with A ~ U[scale]·H·W, r in [ratio]: so
    // A = √(A·r)·√(A/r) is in [(w − ½)(h − ½), (w + ½)(h + ½)] and r in [(w − ½)/(h + ½), (w + ½)/(h − ½)]
    const double w = double(b.width), h = double(b.height);
    CHECK((w + 0.5) * (h + 0.5) >= scale.first * H * W);
    CHECK((w - 0.5) * (h - 0.5) <= scale.second * H * W);
    CHECK((w + 0.5) / (h - 0.5) >= ratio.first);
    CHECK((w - 0.5) / (h + 0.5) <= ratio.second);
  }
  CHECK(fallbacks < 300);
  // an asymmetric ratio range tells width from height: wide boxes only
  for (int i = 0; i < 500; ++i) {
    const CropBox b = random_resized_crop_params(100, 100, {0.1, 0.3}, {2.0, 3.0}, g);
    const double w = double(b.width), h = double(b.height);
    CHECK((w + 0.5) / (h - 0.5) >= 2.0);
    CHECK((w - 0.5) / (h + 0.5) <= 3.0);
  }
  // an impossible scale always falls back: the whole image when its ratio is within bounds
  for (int i = 0; i < 5; ++i) {
    const CropBox b = random_resized_crop_params(H, W, {2.0, 3.0}, ratio, g);
    CHECK((b.top == 0 && b.left == 0 && b.height == H && b.width == W));
  }
  // ... and a centred crop of the clamped ratio otherwise: W/H = 0.8 < 1.5 -> h = round(80/1.5) = 53
  const CropBox f = random_resized_crop_params(H, W, {2.0, 3.0}, {1.5, 2.0}, g);
  CHECK(f.height == 53);
  CHECK(f.width == 80);
  CHECK(f.top == 23);
  CHECK(f.left == 0);
  const CropBox f2 = random_resized_crop_params(10, 40, {2.0, 3.0}, {0.5, 2.0}, g);  // 4 > 2 -> w = 20
  CHECK((f2.height == 10 && f2.width == 20 && f2.top == 0 && f2.left == 10));
  // the transform: size and value range
  const Image out = random_resized_crop(16, {.interpolation = Interpolation::Bicubic})(random_image(3, 40, 30, 2), g);
  CHECK(out.height == 16);
  CHECK(out.width == 16);
  CHECK(out.channels == 3);
  for (float v : out.data) CHECK((v >= 0.f && v <= 1.f));
  // scale (1, 1), ratio of the image: the crop is the whole image, so only a resize
  const Image img = random_image(1, 8, 8, 4);
  check_values(random_resized_crop(8, {.scale = {1.0, 1.0}, .ratio = {1.0, 1.0}})(img, g), img.data);
}

TEST_CASE("random_crop with padding: every window of the padded image, nothing else") {
  const Image img = make_image(1, 2, 2, {1, 2, 3, 4});
  const Image padded = F::pad(img, 1, 1, 1, 1, 0.f);
  Generator g(5);
  std::set<std::pair<int, int>> seen;
  for (int i = 0; i < 400; ++i) {
    const Image out = random_crop(2, 1)(img, g);
    REQUIRE(out.height == 2);
    bool matched = false;
    for (int t = 0; t <= 2; ++t)
      for (int l = 0; l <= 2; ++l)
        if (F::crop(padded, t, l, 2, 2).data == out.data) {
          seen.insert({t, l});
          matched = true;
        }
    CHECK(matched);
  }
  CHECK(seen.size() == 9);
  check_values(random_crop(2)(img, g), img.data);  // same size, no padding: the image
  CHECK_THROWS_WITH_AS(random_crop(3)(img, g), doctest::Contains("random_crop: crop size (3, 3) is larger"), Error);
}

TEST_CASE("random transforms draw from the generator only: same seed, same image; frequencies") {
  const Image img = random_image(3, 12, 10, 9);
  Transform t = compose({random_resized_crop(8), horizontal_flip(),
                         random_apply(color_jitter(0.4f, 0.4f, 0.2f, 0.1f), 0.8),
                         random_grayscale(0.2), gaussian_blur(3), solarize(0.5f, 0.2),
                         normalize(kImageNetMean, kImageNetStd), random_erasing({.probability = 0.5})});
  Generator a(11), b(11), c(12);
  for (int i = 0; i < 5; ++i) {
    const Image x = t(img, a), y = t(img, b);
    CHECK(x.data == y.data);
    if (i == 0) CHECK(t(img, c).data != x.data);
  }
  // flip frequency
  Generator g(13);
  int flips = 0;
  const Image row = make_image(1, 1, 2, {0, 1});
  for (int i = 0; i < 4000; ++i) flips += horizontal_flip(0.3)(row, g).data[0] == 1.f;
  CHECK(flips / 4000.0 == doctest::Approx(0.3).epsilon(0.1));
  int applied = 0;
  Transform add = [](Image x, Generator&) { x.data[0] += 1; return x; };
  for (int i = 0; i < 4000; ++i) applied += random_apply(add, 0.8)(row, g).data[0] == 1.f;
  CHECK(applied / 4000.0 == doctest::Approx(0.8).epsilon(0.05));
  // colour jitter with all strengths 0 is the identity; brightness alone scales within [1 − b, 1 + b]
  check_values(color_jitter(0.f)(img, g), img.data);
  const Image flat(1, 2, 2, 0.5f);
  for (int i = 0; i < 200; ++i) {
    const float v = color_jitter(0.4f)(flat, g).data[0];
    CHECK((v >= 0.5f * 0.6f - 1e-6f && v <= 0.5f * 1.4f + 1e-6f));
  }
}

TEST_CASE("random_erasing: one box of bounded area and ratio, timm's pixel noise") {
  Generator g(17);
  const int64_t H = 40, W = 30;
  for (int i = 0; i < 300; ++i) {
    const Image out = random_erasing({.probability = 1.0, .mode = EraseMode::Const})(Image(2, H, W, 1.f), g);
    int64_t y0 = H, y1 = -1, x0 = W, x1 = -1, zeros = 0;
    for (int64_t y = 0; y < H; ++y)
      for (int64_t x = 0; x < W; ++x)
        if (out.at(0, y, x) == 0.f) {
          ++zeros;
          y0 = std::min(y0, y), y1 = std::max(y1, y), x0 = std::min(x0, x), x1 = std::max(x1, x);
          CHECK(out.at(1, y, x) == 0.f);
        }
    if (zeros == 0) continue;  // 10 attempts failed (rare)
    const int64_t h = y1 - y0 + 1, w = x1 - x0 + 1;
    CHECK(zeros == h * w);  // a rectangle
    CHECK(h < H);
    CHECK(w < W);
    const double area = double(h * w) / (H * W);
    CHECK(area >= 0.02 * 0.5);
    CHECK(area <= (1.0 / 3.0) * 1.3);
    const double r = double(h) / w;  // timm: h = √(area·r), so r = h / w
    CHECK(r >= 0.3 * 0.6);
    CHECK(r <= 3.34 / 0.6);
  }
  // pixel mode: N(0, 1) noise inside the box
  const Transform erase = random_erasing({.probability = 1.0, .scale = {0.3, 0.3}, .ratio = {1.0, 1.0}});
  const Image noisy = erase(Image(1, 20, 20, 100.f), g);
  std::vector<float> inside;
  for (float v : noisy.data)
    if (v != 100.f) inside.push_back(v);
  CHECK(inside.size() == 121);  // h = w = round(√120) = 11
  double mean = 0;
  for (float v : inside) mean += v;
  CHECK(std::fabs(mean / inside.size()) < 0.4);
  check_values(random_erasing({.probability = 0.0})(Image(1, 4, 4, 1.f), g), std::vector<float>(16, 1.f));
}

TEST_CASE("errors name the transform and the fault") {
  CHECK_THROWS_WITH_AS(horizontal_flip(1.5), "horizontal_flip: probability 1.5 is not in [0, 1]", Error);
  CHECK_THROWS_WITH_AS(resize(0), "resize: size (0, 0) must be positive and at most 65536", Error);
  CHECK_THROWS_WITH_AS(center_crop(1 << 20, 4), "center_crop: size (1048576, 4) must be positive and at most 65536", Error);
  CHECK_THROWS_WITH_AS(random_crop(8, -1), "random_crop: padding -1 is not in 0..65536", Error);
  CHECK_THROWS_WITH_AS(color_jitter(-0.1f), doctest::Contains("color_jitter: brightness -0.1 must be non-negative"), Error);
  CHECK_THROWS_WITH_AS(color_jitter(0.f, 0.f, 0.f, 0.6f), "color_jitter: hue 0.6 must be at most 0.5", Error);
  CHECK_THROWS_WITH_AS(gaussian_blur(4), "gaussian_blur: kernel_size 4 must be odd and positive", Error);
  CHECK_THROWS_WITH_AS(random_resized_crop(8, {.scale = {0.9, 0.1}}),
                       doctest::Contains("random_resized_crop: scale (0.9, 0.1) must be an ordered pair"), Error);
  CHECK_THROWS_WITH_AS(normalize({0.5f}, {0.f}), "normalize: std 0 must be non-zero and finite", Error);
  CHECK_THROWS_WITH_AS(normalize({0.1f, 0.2f}, {1.f, 1.f})(Image(3, 2, 2), gen0),
                       "normalize: 2 means and 2 stds for an image of 3 channels", Error);
  CHECK_THROWS_WITH_AS(F::adjust_hue(Image(3, 1, 1), 0.7f), "adjust_hue: hue_factor 0.7 is not in [-0.5, 0.5]", Error);
  CHECK_THROWS_WITH_AS(F::adjust_contrast(Image(2, 1, 1), 1.f),
                       "adjust_contrast: expects a 1- or 3-channel image, got 2 channels", Error);
  CHECK_THROWS_WITH_AS(to_three_channels()(Image(4, 1, 1), gen0), doctest::Contains("got 4 channels"), Error);
  Image broken(3, 2, 2);
  broken.data.resize(5);
  CHECK_THROWS_WITH_AS(F::hflip(broken), "hflip: image of shape (3, 2, 2) holds 5 values", Error);
  CHECK_THROWS_WITH_AS(F::resize(Image(), 2, 2, Interpolation::Bilinear), doctest::Contains("resize: empty image"), Error);
  CHECK_THROWS_WITH_AS(compose({horizontal_flip(), Transform()}), "compose: transform 1 is empty", Error);
  CHECK_THROWS_WITH_AS(random_erasing({.min_count = 2, .max_count = 1}), doctest::Contains("count range (2, 1)"), Error);
}
