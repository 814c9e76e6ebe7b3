// DINO multi-crop: view counts and sizes, the scaled blur kernel, view-major grouping of a
// batch, determinism, small-image configurations, and the errors.
#include <cmath>
#include <set>

#include "data/multicrop.h"
#include "data/random_image.h"
#include "testing.h"

using namespace sima;
using namespace sima::testing;

TEST_CASE("scaled blur kernel: 23 at 224, odd, at least 3, below twice the size") {
  CHECK(scaled_blur_kernel(224) == 23);
  CHECK(scaled_blur_kernel(96) == 9);  // 9.86 -> nearest odd 9
  CHECK(scaled_blur_kernel(112) == 11);
  CHECK(scaled_blur_kernel(28) == 3);
  CHECK(scaled_blur_kernel(12) == 3);
  CHECK(scaled_blur_kernel(1) == 1);
  for (int64_t s = 1; s < 400; ++s) {
    const int64_t k = scaled_blur_kernel(s);
    CHECK(k % 2 == 1);
    CHECK(k / 2 < s);
  }
}

TEST_CASE("DINO defaults: 2 global 224 views and 8 local 96 views, normalised") {
  const DataAugmentationDINO aug;
  CHECK(aug.global_blur_kernel() == 23);
  CHECK(aug.local_blur_kernel() == 9);
  Generator g(1);
  const MultiCropViews v = aug(random_image(3, 60, 80, 1), g);
  REQUIRE(v.global_crops.size() == 2);
  REQUIRE(v.local_crops.size() == 8);
  for (const Image& im : v.global_crops) CHECK((im.channels == 3 && im.height == 224 && im.width == 224));
  for (const Image& im : v.local_crops) CHECK((im.channels == 3 && im.height == 96 && im.width == 96));
  // normalised with ImageNet statistics: values reach below 0
  float lo = 1.f;
  for (float x : v.global_crops[0].data) lo = std::min(lo, x);
  CHECK(lo < 0.f);
}

TEST_CASE("small images: global 28, local 12, grey input, no normalisation") {
  MultiCropOptions o;
  o.global_size = 28;
  o.local_size = 12;
  o.local_crops = 6;
  o.mean = {};
  o.std = {};
  const DataAugmentationDINO aug(o);
  CHECK(aug.global_blur_kernel() == 3);
  CHECK(aug.local_blur_kernel() == 3);
  Generator g(2);
  const Image img = random_image(1, 28, 28, 3);
  for (int i = 0; i < 20; ++i) {
    const MultiCropViews v = aug(img, g);
    REQUIRE(v.global_crops.size() == 2);
    REQUIRE(v.local_crops.size() == 6);
    for (const Image& im : v.global_crops) CHECK((im.channels == 1 && im.height == 28 && im.width == 28));
    for (const Image& im : v.local_crops) CHECK((im.channels == 1 && im.height == 12 && im.width == 12));
    for (const Image& im : v.local_crops)
      for (float x : im.data) CHECK((x >= 0.f && x <= 1.f));
  }
  // to_three_channels makes RGB views of a grey image
  o.to_three_channels = true;
  o.mean = {0.5f};
  o.std = {0.5f};
  const MultiCropViews v3 = DataAugmentationDINO(o)(img, g);
  CHECK(v3.global_crops[1].channels == 3);
  CHECK(v3.local_crops[5].channels == 3);
}

TEST_CASE("blur sigma scaled to the crop: blur_sigma_reference N scales each view's range by its side / N") {
  MultiCropOptions o;
  o.global_size = 28;
  o.local_size = 12;
  o.mean = {};
  o.std = {};
  const DataAugmentationDINO pixels(o);  // reference 0: DINO's [0.1, 2] pixels at any size
  CHECK(pixels.global_blur_sigma() == std::pair<float, float>{0.1f, 2.0f});
  CHECK(pixels.local_blur_sigma() == std::pair<float, float>{0.1f, 2.0f});
  o.blur_sigma_reference = 224;
  const DataAugmentationDINO scaled(o);
  CHECK(scaled.global_blur_sigma().first == doctest::Approx(0.0125));
  CHECK(scaled.global_blur_sigma().second == doctest::Approx(0.25));
  CHECK(scaled.local_blur_sigma().first == doctest::Approx(0.1 * 12 / 224.0));
  CHECK(scaled.local_blur_sigma().second == doctest::Approx(2.0 * 12 / 224.0));
  // the same draws (σ is drawn from the range either way), a blur-only first view: less blur
  // keeps more of the image's local contrast
  o.global1_blur_p = 1.0;
  o.color_jitter_p = 0.0;
  o.grayscale_p = 0.0;
  Generator g1(3), g2(3);
  const Image img = random_image(1, 28, 28, 4);
  const Image a = DataAugmentationDINO(o)(img, g1).global_crops[0];
  o.blur_sigma_reference = 0;
  const Image b = DataAugmentationDINO(o)(img, g2).global_crops[0];
  auto roughness = [](const Image& im) {  // Σ |x(i, j + 1) − x(i, j)|
    double r = 0.0;
    for (int64_t i = 0; i < im.height; ++i)
      for (int64_t j = 0; j + 1 < im.width; ++j) r += std::abs(im.data[size_t(i * im.width + j + 1)] - im.data[size_t(i * im.width + j)]);
    return r;
  };
  CHECK(roughness(a) > roughness(b));
  o.blur_sigma_reference = -1;
  CHECK_THROWS_WITH_AS(DataAugmentationDINO{o}, "multicrop: blur_sigma_reference -1 is not in 0..4096 (0 = sigma in pixels)",
                       Error);
}

TEST_CASE("same seed, same views; another seed, other views; views of one image differ") {
  MultiCropOptions o;
  o.global_size = 32;
  o.local_size = 16;
  o.local_crops = 4;
  const DataAugmentationDINO aug(o);
  const Image img = random_image(3, 40, 40, 4);
  Generator a(7), b(7), c(8);
  const MultiCropViews x = aug(img, a), y = aug(img, b), z = aug(img, c);
  for (int i = 0; i < 2; ++i) CHECK(x.global_crops[i].data == y.global_crops[i].data);
  for (int i = 0; i < 4; ++i) CHECK(x.local_crops[i].data == y.local_crops[i].data);
  CHECK(x.global_crops[0].data != z.global_crops[0].data);
  CHECK(x.global_crops[0].data != x.global_crops[1].data);
  std::set<std::vector<float>> locals;
  for (const Image& im : x.local_crops) locals.insert(im.data);
  CHECK(locals.size() == 4);
}

TEST_CASE("stack_multicrop groups by resolution, view-major: row v·B + b is view v of sample b") {
  const int64_t B = 3, NG = 2, NL = 4;
  std::vector<MultiCropViews> samples(B);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t v = 0; v < NG; ++v) samples[b].global_crops.push_back(Image(2, 5, 5, float(100 * v + b)));
    for (int64_t v = 0; v < NL; ++v) samples[b].local_crops.push_back(Image(2, 3, 3, float(1000 + 100 * v + b)));
  }
  const MultiCropBatch batch = stack_multicrop(samples, {7, 8, 9});
  REQUIRE(batch.global_crops.shape() == Shape({NG * B, 2, 5, 5}));
  REQUIRE(batch.local_crops.shape() == Shape({NL * B, 2, 3, 3}));
  CHECK(batch.batch_size == B);
  CHECK(batch.n_global == NG);
  CHECK(batch.n_local == NL);
  CHECK(batch.labels == std::vector<int64_t>{7, 8, 9});
  for (int64_t v = 0; v < NG; ++v)
    for (int64_t b = 0; b < B; ++b) {
      CHECK(batch.global_crops.at({v * B + b, 0, 0, 0}) == float(100 * v + b));
      CHECK(batch.global_crops.at({v * B + b, 1, 4, 4}) == float(100 * v + b));
    }
  for (int64_t v = 0; v < NL; ++v)
    for (int64_t b = 0; b < B; ++b) CHECK(batch.local_crops.at({v * B + b, 1, 2, 1}) == float(1000 + 100 * v + b));

  // from the augmentation itself: real views stack the same way
  MultiCropOptions o;
  o.global_size = 16;
  o.local_size = 8;
  o.local_crops = 2;
  const DataAugmentationDINO aug(o);
  Generator g(3);
  std::vector<MultiCropViews> real;
  for (int b = 0; b < 2; ++b) real.push_back(aug(random_image(3, 20, 20, b), g));
  const MultiCropBatch rb = stack_multicrop(real);
  REQUIRE(rb.global_crops.shape() == Shape({4, 3, 16, 16}));
  CHECK(rb.global_crops.at({1, 2, 3, 4}) == real[1].global_crops[0].at(2, 3, 4));  // view 0, sample 1
  CHECK(rb.global_crops.at({2, 0, 5, 6}) == real[0].global_crops[1].at(0, 5, 6));  // view 1, sample 0
  CHECK(rb.local_crops.at({3, 1, 7, 7}) == real[1].local_crops[1].at(1, 7, 7));

  // no local crops: an undefined local group
  std::vector<MultiCropViews> only_global(1);
  only_global[0].global_crops = {Image(1, 2, 2), Image(1, 2, 2)};
  CHECK(!stack_multicrop(only_global).local_crops.defined());
}

TEST_CASE("errors name the fault") {
  CHECK_THROWS_WITH_AS(stack_multicrop({}), "stack_multicrop: no samples", Error);
  std::vector<MultiCropViews> s(2);
  s[0].global_crops = {Image(1, 2, 2), Image(1, 2, 2)};
  s[1].global_crops = {Image(1, 2, 2)};
  CHECK_THROWS_WITH_AS(stack_multicrop(s),
                       "stack_multicrop: sample 1 has 1 global and 0 local views, sample 0 has 2 and 0", Error);
  s[1].global_crops = {Image(1, 2, 2), Image(1, 3, 2)};
  CHECK_THROWS_WITH_AS(stack_multicrop(s), doctest::Contains("global view 1 of sample 1 is (1, 3, 2), expected (1, 2, 2)"),
                       Error);
  s[1].global_crops[1] = Image(1, 2, 2);
  CHECK_THROWS_WITH_AS(stack_multicrop(s, {1}), "stack_multicrop: 1 labels for 2 samples", Error);
  MultiCropOptions o;
  o.local_size = 0;
  CHECK_THROWS_WITH_AS(DataAugmentationDINO{o}, "multicrop: crop sizes (global 224, local 0) must be in 1..4096", Error);
  o = {};
  o.global_blur_kernel = 4;
  CHECK_THROWS_WITH_AS(DataAugmentationDINO{o}, doctest::Contains("global_blur_kernel 4 must be odd"), Error);
  o = {};
  o.solarize_p = 1.5;
  CHECK_THROWS_WITH_AS(DataAugmentationDINO{o}, "multicrop: probability 1.5 is not in [0, 1]", Error);
  o = {};
  o.mean = {0.5f, 0.5f};  // 2 means for a 3-channel image: caught when applied
  Generator g(1);
  const DataAugmentationDINO bad(o);
  CHECK_THROWS_WITH_AS(bad(random_image(3, 8, 8, 1), g),
                       "normalize: 2 means and 3 stds for an image of 3 channels", Error);
}
