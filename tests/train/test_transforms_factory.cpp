// train/config/transforms_factory: the eval transform against values by hand (normalise only) and against
// the functional ops composed here (resize by floor(img_size / crop_pct), centre crop,
// channel match); the train transform's determinism per seed, its crops (a window of the
// padded image), flips and shapes; validate_augment's errors, one per field.
#include <cmath>
#include <set>

#include "data/functional.h"
#include "data/pil_resize.h"
#include "data/random_image.h"
#include "testing.h"
#include "train/config/transforms_factory.h"

using namespace sima;
using namespace sima::testing;
namespace F = sima::transforms::functional;
using sima::transforms::Interpolation;
using sima::pil::Image8;

namespace {

// The small grey model's input: 1 × 28 × 28, mean 0.2860, std 0.3530 (registry "…_28").
ModelConfig grey28() {
  ModelConfig c;
  c.img_size = 28;
  c.in_chans = 1;
  c.num_classes = 10;
  c.mean = {0.2860f};
  c.std = {0.3530f};
  return c;
}
ModelConfig rgb28() {
  ModelConfig c = grey28();
  c.in_chans = 3;
  c.mean = {0.5f, 0.4f, 0.3f};
  c.std = {0.2f, 0.25f, 0.5f};
  return c;
}

// (x − mean) / std per channel, written out.
Image normalized(Image img, const std::vector<float>& mean, const std::vector<float>& std) {
  for (int64_t c = 0; c < img.channels; ++c)
    for (int64_t i = 0; i < img.height * img.width; ++i) {
      float& v = img.data[size_t(c * img.height * img.width + i)];
      v = (v - mean[size_t(c)]) / std[size_t(c)];
    }
  return img;
}

void check_same_image(const Image& got, const Image& expected, float tol = 1e-6f) {
  REQUIRE(got.channels == expected.channels);
  REQUIRE(got.height == expected.height);
  REQUIRE(got.width == expected.width);
  float worst = 0.f;
  for (size_t i = 0; i < expected.data.size(); ++i) worst = std::fmax(worst, sima::testing::abs_diff(got.data[i], expected.data[i]));
  CHECK(worst <= tol);
}

Image run(const Transform& t, const Image& img, uint64_t seed = 0) {
  Generator g(seed);
  return t(img, g);
}

}  // namespace

TEST_CASE("default_crop_pct: 0.875 from 100 pixels up, 1.0 below") {
  CHECK(default_crop_pct(224) == 0.875);
  CHECK(default_crop_pct(100) == 0.875);
  CHECK(default_crop_pct(99) == 1.0);
  CHECK(default_crop_pct(32) == 1.0);
  CHECK(default_crop_pct(28) == 1.0);
}

TEST_CASE("eval_transform: a 28×28 grey image for a grey 28 model is normalised only") {
  Image img(1, 28, 28);
  for (int64_t i = 0; i < img.numel(); ++i) img.data[size_t(i)] = float(i % 256) / 255.f;
  // Already img_size × img_size: no resize, no crop (crop_pct 1 on every path; auto and the
  // float path pass such images through for any crop_pct, only an explicit pil resizes them).
  for (auto [crop_pct, resize] : {std::pair{1.0, EvalResize::Auto}, {1.0, EvalResize::Pil}, {1.0, EvalResize::Float},
                                  {0.875, EvalResize::Float}, {0.875, EvalResize::Auto}}) {
    CAPTURE(crop_pct);
    CAPTURE(eval_resize_name(resize));
    const Image out = run(eval_transform(grey28(), crop_pct, resize), img);
    REQUIRE(out.channels == 1);
    REQUIRE(out.height == 28);
    REQUIRE(out.width == 28);
    // by hand: pixel 0 is 0 -> −0.2860 / 0.3530; pixel 255 is 1 -> 0.7140 / 0.3530
    CHECK(out.data[0] == doctest::Approx(-0.2860 / 0.3530).epsilon(1e-6));
    CHECK(out.data[255] == doctest::Approx(0.7140 / 0.3530).epsilon(1e-6));
    CHECK(out.data[300] == doctest::Approx((44 / 255.0 - 0.2860) / 0.3530).epsilon(1e-6));
    check_same_image(out, normalized(img, {0.2860f}, {0.3530f}));
  }
}

TEST_CASE("eval_transform: an explicit pil resizes an 8-bit img_size × img_size image as timm does (crop_pct < 1)") {
  Image img(1, 28, 28);
  for (int64_t i = 0; i < img.numel(); ++i) img.data[size_t(i)] = float(i % 256) / 255.f;
  // timm: Resize(floor(28 / 0.875) = 32) then CenterCrop(28) at offset 2, even for a 28 × 28 image.
  const Image8 resized = pil::resize_shorter(pil::to_uint8(img), 32, pil::Resample::Bicubic);
  const Image8 expected8 = pil::center_crop(resized, 28, 28);
  const Image expected = normalized(pil::from_uint8(expected8), {0.2860f}, {0.3530f});
  check_same_image(run(eval_transform(grey28(), 0.875, EvalResize::Pil), img), expected);
}

TEST_CASE("eval_transform: a 3-channel 64×48 image for a grey 28 model -> 1×28×28 (resize, crop, luma)") {
  const Image img = random_image(3, 48, 64, 1);  // height 48, width 64
  // crop_pct 1: shorter side 48 -> 28, width int(28·64/48) = 37; centre crop 28; grey; normalise.
  const Image out = run(eval_transform(grey28(), 1.0), img);
  REQUIRE(out.channels == 1);
  REQUIRE(out.height == 28);
  REQUIRE(out.width == 28);
  const Image resized = F::resize_shorter(img, 28, Interpolation::Bicubic);
  REQUIRE(resized.height == 28);
  REQUIRE(resized.width == 37);
  check_same_image(out, normalized(F::rgb_to_grayscale(F::center_crop(resized, 28, 28), 1), {0.2860f}, {0.3530f}));
  // crop_pct 0.875: floor(28 / 0.875) = 32; crop_pct 0.95: floor(29.47) = 29.
  for (auto [crop_pct, scale] : {std::pair<double, int64_t>{0.875, 32}, {0.95, 29}}) {
    CAPTURE(crop_pct);
    const Image expected = normalized(
        F::rgb_to_grayscale(F::center_crop(F::resize_shorter(img, scale, Interpolation::Bicubic), 28, 28), 1),
        {0.2860f}, {0.3530f});
    check_same_image(run(eval_transform(grey28(), crop_pct), img), expected);
  }
}

TEST_CASE("eval_transform: grey images for an RGB model are repeated over the channels") {
  const Image img = random_image(1, 28, 28, 2);
  const Image out = run(eval_transform(rgb28(), 1.0), img);
  REQUIRE(out.channels == 3);
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t i = 0; i < 28 * 28; i += 97) {
      const float mean[3] = {0.5f, 0.4f, 0.3f}, std[3] = {0.2f, 0.25f, 0.5f};
      CHECK(out.data[size_t(c * 784 + i)] == doctest::Approx((img.data[size_t(i)] - mean[c]) / std[c]).epsilon(1e-6));
    }
  // Images of another channel count, crop_pct out of range: errors.
  CHECK(error_message([] { run(eval_transform(grey28(), 1.0), Image(2, 28, 28)); }) ==
        "transforms: cannot convert a 2-channel image to the model's 1 channels");
  CHECK(error_message([] { eval_transform(grey28(), 0.0); }) == "eval_transform: crop_pct 0 is not in (0, 1]");
  CHECK(error_message([] { eval_transform(grey28(), 1.5); }) == "eval_transform: crop_pct 1.5 is not in (0, 1]");
}

TEST_CASE("train_transform: same generator seed, same image; another seed, another image") {
  AugmentOptions a;
  a.crop = "random_resized_crop";
  a.rand_augment = "rand-m9-mstd0.5-inc1";
  a.random_erasing = 0.5;
  const Transform t = train_transform(grey28(), a);
  const Image img = random_image(3, 40, 40, 3);  // RGB data, grey model
  const Image a1 = run(t, img, 7), a2 = run(t, img, 7);
  REQUIRE(a1.channels == 1);
  REQUIRE(a1.height == 28);
  REQUIRE(a1.width == 28);
  CHECK(a1.data == a2.data);
  int differing = 0;
  for (uint64_t seed = 8; seed < 12; ++seed) differing += run(t, img, seed).data != a1.data;
  CHECK(differing == 4);

  // Colour jitter (no RandAugment) and the RGB model: deterministic too, 3 × 28 × 28.
  AugmentOptions j;
  j.color_jitter = 0.4;
  const Transform tj = train_transform(rgb28(), j);
  const Image j1 = run(tj, img, 1);
  CHECK(j1.channels == 3);
  CHECK(j1.height == 28);
  CHECK(j1.data == run(tj, img, 1).data);
  CHECK(j1.data != run(tj, img, 2).data);
}

TEST_CASE("train_transform: crop none / random_crop with padding / hflip, against the image") {
  const Image img = random_image(1, 28, 28, 4);
  const Image norm = normalized(img, {0.2860f}, {0.3530f});
  AugmentOptions none;
  none.crop = "none";
  none.hflip = 0.0;
  check_same_image(run(train_transform(grey28(), none), img, 1), norm);
  none.hflip = 1.0;
  check_same_image(run(train_transform(grey28(), none), img, 1), normalized(F::hflip(img), {0.2860f}, {0.3530f}));

  // random_crop with padding 2: the output is a 28×28 window of the zero-padded 32×32 image
  // (then normalised); over seeds several windows occur.
  AugmentOptions rc;
  rc.crop = "random_crop";
  rc.padding = 2;
  rc.hflip = 0.0;
  const Transform t = train_transform(grey28(), rc);
  const Image padded = F::pad(img, 2, 2, 2, 2, 0.f);
  std::set<std::pair<int64_t, int64_t>> windows;
  for (uint64_t seed = 0; seed < 30; ++seed) {
    const Image out = run(t, img, seed);
    REQUIRE(out.height == 28);
    bool found = false;
    for (int64_t top = 0; top <= 4 && !found; ++top)
      for (int64_t left = 0; left <= 4 && !found; ++left) {
        const Image w = normalized(F::crop(padded, top, left, 28, 28), {0.2860f}, {0.3530f});
        bool same = true;
        for (size_t i = 0; i < w.data.size() && same; ++i) same = std::fabs(w.data[i] - out.data[i]) <= 1e-6f;
        if (same) {
          found = true;
          windows.insert({top, left});
        }
      }
    CHECK(found);
  }
  CHECK(windows.size() >= 5);

  // An image of another size is first resized (shorter side -> img_size, bicubic) and centred.
  rc.padding = 0;
  const Image big = random_image(1, 40, 32, 5);
  const Image expected =
      normalized(F::center_crop(F::resize_shorter(big, 28, Interpolation::Bicubic), 28, 28), {0.2860f}, {0.3530f});
  check_same_image(run(train_transform(grey28(), rc), big, 3), expected);
}

TEST_CASE("validate_augment: each field's error names augment.<field> and the allowed values") {
  auto msg = [](auto edit) {
    AugmentOptions a;
    edit(a);
    return error_message([&] { validate_augment(a); });
  };
  CHECK(msg([](AugmentOptions&) {}) == "(no error)");
  CHECK(msg([](AugmentOptions& a) { a.crop = "center"; }) ==
        "augment.crop: 'center' is not one of: random_resized_crop, random_crop, none");
  CHECK(msg([](AugmentOptions& a) { a.scale = {0.0, 1.0}; }) ==
        "augment.scale: (0, 1) must satisfy 0 < min <= max <= 1");
  CHECK(msg([](AugmentOptions& a) { a.scale = {0.5, 0.2}; }) ==
        "augment.scale: (0.5, 0.2) must satisfy 0 < min <= max <= 1");
  CHECK(msg([](AugmentOptions& a) { a.scale = {0.5, 1.5}; }) ==
        "augment.scale: (0.5, 1.5) must satisfy 0 < min <= max <= 1");
  CHECK(msg([](AugmentOptions& a) { a.ratio = {2.0, 1.0}; }) == "augment.ratio: (2, 1) must satisfy 0 < min <= max");
  CHECK(msg([](AugmentOptions& a) { a.padding = -1; }) == "augment.padding: -1 is not in [0, 65536]");
  CHECK(msg([](AugmentOptions& a) { a.hflip = 1.5; }) == "augment.hflip: 1.5 is not a probability in [0, 1]");
  CHECK(msg([](AugmentOptions& a) { a.rand_augment = "rand-w2"; }).rfind("augment.rand_augment: ", 0) == 0);
  CHECK(msg([](AugmentOptions& a) { a.color_jitter = -0.1; }) ==
        "augment.color_jitter: -0.1 must be a non-negative number");
  CHECK(msg([](AugmentOptions& a) { a.random_erasing = 2; }) ==
        "augment.random_erasing: 2 is not a probability in [0, 1]");
  CHECK(msg([](AugmentOptions& a) { a.crop_pct = 0; }) == "augment.crop_pct: 0 is not in (0, 1]");
  CHECK(msg([](AugmentOptions& a) { a.crop_pct = std::nan(""); }) == "augment.crop_pct: nan is not in (0, 1]");
  // train_transform validates first.
  AugmentOptions bad;
  bad.hflip = -1;
  CHECK(error_message([&] { train_transform(grey28(), bad); }) == "augment.hflip: -1 is not a probability in [0, 1]");
}
