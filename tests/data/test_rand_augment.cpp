// RandAugment: the config parser (good strings and every kind of bad one), each PIL op on
// tiny 8-bit images against values worked out by hand (and confirmed with Pillow 9.4), the
// level -> argument maps of timm, and determinism for a seed.
#include <cmath>
#include <set>

#include "data/pil_ops.h"
#include "data/rand_augment.h"
#include "testing.h"

using namespace sima;
using namespace sima::testing;
using pil::Image8;

namespace {

Image8 make8(int64_t c, int64_t h, int64_t w, std::vector<uint8_t> values) {
  Image8 img(c, h, w);
  REQUIRE(values.size() == img.data.size());
  img.data = std::move(values);
  return img;
}

std::vector<int> ints(const Image8& img) { return {img.data.begin(), img.data.end()}; }

Image random_image(int64_t c, int64_t h, int64_t w, uint64_t seed) {
  Generator g(seed);
  Image img(c, h, w);
  for (float& v : img.data) v = static_cast<float>(g.randint(256)) / 255.f;
  return img;
}

}  // namespace

TEST_CASE("parse_rand_augment reads timm's config strings") {
  RandAugmentConfig c = parse_rand_augment("rand-m9-mstd0.5-inc1");
  CHECK(c.magnitude == 9);
  CHECK(c.magnitude_std == 0.5);
  CHECK(c.increasing);
  CHECK(c.num_layers == 2);
  CHECK(c.magnitude_max == 10);
  c = parse_rand_augment("rand-n3-m5");
  CHECK(c.num_layers == 3);
  CHECK(c.magnitude == 5);
  CHECK(!c.increasing);
  CHECK(c.magnitude_std == 0.0);
  c = parse_rand_augment("rand");
  CHECK(c.magnitude == 10);
  CHECK(std::isinf(parse_rand_augment("rand-m9-mstd101").magnitude_std));  // > 100: uniform
  CHECK(parse_rand_augment("rand-mmax20-m15").magnitude == 15);
  CHECK(!parse_rand_augment("rand-inc0").increasing);
}

TEST_CASE("parse_rand_augment rejects bad strings, naming the section") {
  auto msg = [](const std::string& s) { return error_message([&] { parse_rand_augment(s); }); };
  CHECK(msg("") == "rand_augment: config '' must start with 'rand' (e.g. 'rand-m9-mstd0.5-inc1')");
  CHECK(msg("rnd-m9").find("must start with 'rand'") != std::string::npos);
  CHECK(msg("rand-m") == "rand_augment: config 'rand-m': section 'm' is not <key><number>");
  CHECK(msg("rand-9") == "rand_augment: config 'rand-9': section '9' is not <key><number>");
  CHECK(msg("rand-x9") == "rand_augment: config 'rand-x9': unknown section 'x9' (expected m, n, mstd, mmax or inc)");
  CHECK(msg("rand-m9.5") == "rand_augment: config 'rand-m9.5': section 'm9.5': magnitude must be an integer");
  CHECK(msg("rand-m11") == "rand_augment: config 'rand-m11': magnitude 11 is not in 0..10");
  CHECK(msg("rand--m9") == "rand_augment: config 'rand--m9': empty section 1");
  CHECK(msg("rand-m9-") == "rand_augment: config 'rand-m9-': empty section 2");
  CHECK(msg("rand-w0") == "rand_augment: config 'rand-w0': weighted op choice ('w0') is not supported");
  CHECK(msg("rand-inc2") == "rand_augment: config 'rand-inc2': section 'inc2': inc must be 0 or 1");
  CHECK(msg("rand-n-1").find("section 'n' is not <key><number>") != std::string::npos);
  CHECK(msg("rand-n100000") ==
        "rand_augment: config 'rand-n100000': section 'n100000': ops per image must be an integer in 0..64");
  CHECK(msg("rand-mstd0.5x").find("magnitude std must be a non-negative number") != std::string::npos);
  CHECK(msg("rand-m99999999999999999999").find("magnitude must be an integer") != std::string::npos);
}

TEST_CASE("op sets are timm's") {
  const auto inc = rand_augment_ops(true), plain = rand_augment_ops(false);
  REQUIRE(inc.size() == 15);
  REQUIRE(plain.size() == 15);
  CHECK(std::string(rand_augment_op_name(inc[4])) == "PosterizeIncreasing");
  CHECK(std::string(rand_augment_op_name(inc[5])) == "SolarizeIncreasing");
  CHECK(std::string(rand_augment_op_name(inc[10])) == "SharpnessIncreasing");
  CHECK(std::string(rand_augment_op_name(plain[4])) == "Posterize");
  CHECK(std::string(rand_augment_op_name(plain[14])) == "TranslateYRel");
  CHECK(fill_from_mean({0.485f, 0.456f, 0.406f}) == std::vector<uint8_t>{124, 116, 104});
}

TEST_CASE("point ops: invert, posterize, solarize, solarize_add") {
  const Image8 x = make8(1, 1, 5, {0, 100, 127, 128, 255});
  CHECK(ints(pil::invert(x)) == std::vector<int>{255, 155, 128, 127, 0});
  CHECK(ints(pil::posterize(x, 2)) == std::vector<int>{0, 64, 64, 128, 192});  // & 0xC0
  CHECK(ints(pil::posterize(x, 1)) == std::vector<int>{0, 0, 0, 128, 128});
  CHECK(ints(pil::posterize(x, 0)) == std::vector<int>{0, 0, 0, 0, 0});
  CHECK(ints(pil::posterize(x, 8)) == ints(x));
  CHECK(ints(pil::solarize(x, 128)) == std::vector<int>{0, 100, 127, 127, 0});
  CHECK(ints(pil::solarize(x, 256)) == ints(x));
  CHECK(ints(pil::solarize(x, 0)) == ints(pil::invert(x)));
  CHECK(ints(pil::solarize_add(x, 100)) == std::vector<int>{100, 200, 227, 128, 255});
  CHECK(ints(pil::solarize_add(x, 200)) == std::vector<int>{200, 255, 255, 128, 255});
  CHECK_THROWS_WITH_AS(pil::posterize(x, 9), "posterize: bits 9 is not in 0..8", Error);
}

TEST_CASE("autocontrast and equalize work per channel on the histogram") {
  // lo 50, hi 150: v -> int(v·2.55 − 127.5)
  CHECK(ints(pil::autocontrast(make8(1, 1, 4, {50, 100, 150, 100}))) == std::vector<int>{0, 127, 255, 127});
  // a single value is left alone; channels are independent
  CHECK(ints(pil::autocontrast(make8(2, 1, 2, {7, 7, 10, 20}))) == std::vector<int>{7, 7, 0, 255});
  // 1024 pixels: 512 × 0, 256 × 100, 256 × 200. step = (1024 − 256) // 256 = 3,
  // lut[v] = (1 + Σ_{i<v} h[i]) // 3: 0 -> 0, 100 -> 513 // 3 = 171, 200 -> 769 // 3 = 256 -> 255
  Image8 img(1, 32, 32, 0);
  for (int i = 512; i < 1024; ++i) img.data[i] = i < 768 ? 100 : 200;
  const Image8 eq = pil::equalize(img);
  CHECK(eq.data[0] == 0);
  CHECK(eq.data[600] == 171);
  CHECK(eq.data[900] == 255);
  // too few pixels for a step of at least 1: unchanged
  CHECK(ints(pil::equalize(make8(1, 1, 4, {0, 0, 1, 2}))) == std::vector<int>{0, 0, 1, 2});
}

TEST_CASE("enhance ops: integer greyscale, truncating blend, SMOOTH for sharpness") {
  CHECK(ints(pil::grayscale(make8(3, 1, 3, {255, 0, 0, 0, 255, 0, 0, 0, 255}))) == std::vector<int>{76, 150, 29});
  const Image8 x = make8(1, 1, 3, {255, 3, 100});
  CHECK(ints(pil::enhance_brightness(x, 0.5f)) == std::vector<int>{127, 1, 50});
  CHECK(ints(pil::enhance_brightness(x, 1.5f)) == std::vector<int>{255, 4, 150});
  const Image8 c = make8(1, 1, 4, {0, 100, 200, 100});  // mean 100
  CHECK(ints(pil::enhance_contrast(c, 0.f)) == std::vector<int>{100, 100, 100, 100});
  CHECK(ints(pil::enhance_contrast(c, 2.f)) == std::vector<int>{0, 100, 255, 100});
  CHECK(ints(pil::enhance_color(make8(3, 1, 1, {255, 0, 0}), 0.f)) == std::vector<int>{76, 76, 76});
  CHECK(ints(pil::enhance_color(c, 0.3f)) == ints(c));  // grey images have no colour
  Image8 s(1, 3, 3, 0);
  s.at(0, 1, 1) = 130;  // smoothed centre: 0.5 + 130·5/13 = 50.5 -> 50
  CHECK(pil::enhance_sharpness(s, 0.f).at(0, 1, 1) == 50);
  CHECK(ints(pil::enhance_sharpness(s, 1.f)) == ints(s));
  CHECK(pil::enhance_sharpness(s, 2.f).at(0, 1, 1) == 210);  // 50 + 2·(130 − 50)
  CHECK(pil::enhance_sharpness(s, 2.f).at(0, 0, 0) == 0);
}

TEST_CASE("affine and rotate: identity, translation with fill, rotation by 90 degrees") {
  Image8 img(3, 5, 5);
  for (size_t i = 0; i < img.data.size(); ++i) img.data[i] = static_cast<uint8_t>(i * 3);
  for (auto r : {pil::Resample::Nearest, pil::Resample::Bilinear, pil::Resample::Bicubic}) {
    CHECK(ints(pil::affine(img, {1, 0, 0, 0, 1, 0}, r, {0})) == ints(img));
    CHECK(ints(pil::rotate(img, 0.0, r, {0})) == ints(img));
    // output x reads input x + 1; the last column comes from outside: the fill
    CHECK(ints(pil::affine(make8(1, 1, 4, {10, 20, 30, 40}), {1, 0, 1, 0, 1, 0}, r, {7})) ==
          std::vector<int>{20, 30, 40, 7});
  }
  // counter-clockwise: out[y][x] = in[x][W − 1 − y]
  const Image8 sq = make8(1, 3, 3, {0, 10, 20, 30, 40, 50, 60, 70, 80});
  const std::vector<int> rotated{20, 50, 80, 10, 40, 70, 0, 30, 60};
  CHECK(ints(pil::rotate(sq, 90.0, pil::Resample::Nearest, {0})) == rotated);
  CHECK(ints(pil::rotate(sq, 90.0, pil::Resample::Bilinear, {0})) == rotated);
  const Image8 rot = pil::rotate(img, 30.0, pil::Resample::Bicubic, {1, 2, 3});
  CHECK(rot.height == 5);
  CHECK(rot.width == 5);
  CHECK(rot.at(2, 0, 0) == 3);  // a corner rotated out of the image gets the channel's fill
}

TEST_CASE("RandAugment::apply maps magnitudes as timm's level functions") {
  const RandAugment ra("rand-m9-inc1", {.fill = {9, 9, 9}});
  const Image8 x = make8(1, 1, 5, {0, 100, 127, 128, 255});
  const auto bl = pil::Resample::Bilinear;
  using O = RandAugmentOp;
  // PosterizeIncreasing: 4 − int(4·m/10) bits: m 9 -> 1 bit, m 10 -> 0 bits, m 0 -> 4 bits
  CHECK(ints(ra.apply(O::PosterizeIncreasing, x, 9, false, bl)) == ints(pil::posterize(x, 1)));
  CHECK(ints(ra.apply(O::PosterizeIncreasing, x, 10, false, bl)) == ints(pil::posterize(x, 0)));
  CHECK(ints(ra.apply(O::PosterizeIncreasing, x, 0, false, bl)) == ints(pil::posterize(x, 4)));
  CHECK(ints(ra.apply(O::Posterize, x, 5, false, bl)) == ints(pil::posterize(x, 2)));
  // SolarizeIncreasing: threshold 256 − int(256·m/10)
  CHECK(ints(ra.apply(O::SolarizeIncreasing, x, 10, false, bl)) == ints(pil::invert(x)));
  CHECK(ints(ra.apply(O::SolarizeIncreasing, x, 0, false, bl)) == ints(x));
  CHECK(ints(ra.apply(O::SolarizeIncreasing, x, 5, false, bl)) == ints(pil::solarize(x, 128)));
  CHECK(ints(ra.apply(O::SolarizeAdd, x, 10, false, bl)) == ints(pil::solarize_add(x, 110)));
  // enhance: 1 ± 0.9·m/10 (at least 0.1) for the increasing ops, 0.1 + 1.8·m/10 for the plain ones
  const Image8 rgb = make8(3, 2, 2, {200, 10, 30, 90, 15, 250, 60, 5, 100, 120, 140, 160});
  CHECK(ints(ra.apply(O::ColorIncreasing, rgb, 10, true, bl)) == ints(pil::enhance_color(rgb, 0.1f)));
  CHECK(ints(ra.apply(O::ContrastIncreasing, rgb, 5, false, bl)) == ints(pil::enhance_contrast(rgb, 1.45f)));
  CHECK(ints(ra.apply(O::Brightness, rgb, 5, false, bl)) == ints(pil::enhance_brightness(rgb, 1.0f)));
  // geometry: rotate ±30·m/10 degrees, shear ±0.3·m/10, translate ±0.45·m/10 of the size
  Image8 img(1, 6, 6);
  for (size_t i = 0; i < img.data.size(); ++i) img.data[i] = static_cast<uint8_t>(i * 7);
  CHECK(ints(ra.apply(O::Rotate, img, 10, true, bl)) == ints(pil::rotate(img, -30.0, bl, {9})));
  CHECK(ints(ra.apply(O::ShearX, img, 5, false, bl)) == ints(pil::affine(img, {1, 0.15, 0, 0, 1, 0}, bl, {9})));
  CHECK(ints(ra.apply(O::ShearY, img, 5, true, bl)) == ints(pil::affine(img, {1, 0, 0, -0.15, 1, 0}, bl, {9})));
  const Image8 row = make8(1, 1, 20, std::vector<uint8_t>(20, 50));
  const auto shifted = ints(ra.apply(O::TranslateXRel, row, 10, false, bl));  // 0.45·20 = 9 pixels left
  for (int i = 0; i < 20; ++i) CHECK(shifted[i] == (i < 11 ? 50 : 9));
  CHECK(ints(ra.apply(O::TranslateYRel, img, 0, false, bl)) == ints(img));
}

TEST_CASE("RandAugment on float images: deterministic for a seed, 8-bit values, any op set") {
  const RandAugment ra("rand-m9-mstd0.5-inc1");
  const Image img = random_image(3, 16, 12, 1);
  std::set<std::vector<float>> distinct;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    Generator a(seed), b(seed);
    const Image x = ra(img, a), y = ra(img, b);
    CHECK(x.data == y.data);
    CHECK(x.channels == 3);
    CHECK(x.height == 16);
    CHECK(x.width == 12);
    for (float v : x.data) {
      const float q = v * 255.f;
      CHECK(std::fabs(q - std::round(q)) < 1e-3f);
      CHECK((v >= 0.f && v <= 1.f));
    }
    distinct.insert(x.data);
  }
  CHECK(distinct.size() > 10);
  // n0: no op, only the quantisation (exact for values k/255)
  Generator g(3);
  CHECK(RandAugment("rand-n0")(img, g).data == img.data);
  // grey images and the plain op set, uniform magnitudes
  const RandAugment plain("rand-m10-n4-mstd200");
  for (int i = 0; i < 30; ++i) {
    const Image out = plain(random_image(1, 9, 7, i), g);
    CHECK(out.channels == 1);
  }
  // the transform() wrapper draws the same numbers
  Generator c(5), d(5);
  CHECK(ra.transform()(img, c).data == ra(img, d).data);
  CHECK_THROWS_WITH_AS(ra(Image(2, 3, 3), g), "to_uint8: expects a 1- or 3-channel image, got 2 channels", Error);
  CHECK_THROWS_WITH_AS(RandAugment("rand-m5", {.fill = {1, 2}}), "rand_augment: fill has 2 values, expected 1 or 3", Error);
}

TEST_CASE("each chosen op is applied with probability 0.5") {
  // Invert only, applied or not: count how often the image comes back inverted
  RandAugmentConfig c;
  c.magnitude = 5;
  c.num_layers = 1;
  RandAugment ra(c);
  const Image img = random_image(1, 4, 4, 2);
  Generator g(7);
  int unchanged = 0;
  const int n = 6000;
  for (int i = 0; i < n; ++i) unchanged += ra(img, g).data == img.data;
  // P(unchanged) = 0.5 (skipped) + 0.5 · P(op is a no-op on this image): at least 0.5, well below 1
  CHECK(unchanged > n * 0.47);
  CHECK(unchanged < n * 0.75);
}
