// Pillow's 8-bit resize and timm's eval transform, byte for byte: every case of
// tests/parity/gen_pil_resize.py (Debian's python3-pil and python3-torchvision) runs here.
//   resize: pil::resize equals Image.resize((w, h), NEAREST | BILINEAR | BICUBIC) in every byte
//   crop:   pil::center_crop equals torchvision CenterCrop (with its zero padding)
//   eval:   eval_transform (resize auto and pil) equals timm's Resize(floor(S / crop_pct),
//           BICUBIC) -> CenterCrop(S) bytes and, after ToTensor + Normalize, the float tensor
//           to 1e-6; the float path (resize float) is the old F.interpolate-like one and differs.
//   classes: imagenet_class_names() equals torchvision's _IMAGENET_CATEGORIES.
// The reference directory comes from the CTest fixture parity.generate_pil_resize
// (SIMA_PIL_RESIZE_DIR).
#include "testing.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "data/imagenet_classes.h"
#include "data/pil_resize.h"
#include "train/config/transforms_factory.h"

using namespace sima;
using json = nlohmann::json;

namespace {

std::string ref_dir() {
  const char* dir = std::getenv("SIMA_PIL_RESIZE_DIR");
  REQUIRE_MESSAGE(dir != nullptr,
                  "SIMA_PIL_RESIZE_DIR is not set: run through ctest (fixture parity.generate_pil_resize)");
  return dir;
}

const json& manifest() {
  static const json m = [] {
    std::ifstream f(ref_dir() + "/manifest.json");
    REQUIRE_MESSAGE(f.good(), "cannot open ", ref_dir(), "/manifest.json");
    return json::parse(f);
  }();
  return m;
}

std::vector<char> read_bytes(const json& a) {
  const std::string path = ref_dir() + "/" + a.at("file").get<std::string>();
  std::ifstream f(path, std::ios::binary);
  REQUIRE_MESSAGE(f.good(), "cannot open ", path);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

pil::Image8 read_u8(const json& a) {
  const std::vector<int64_t> s = a.at("shape").get<std::vector<int64_t>>();
  REQUIRE(s.size() == 3);
  pil::Image8 img(s[0], s[1], s[2]);
  const std::vector<char> b = read_bytes(a);
  REQUIRE(b.size() == img.data.size());
  std::copy(b.begin(), b.end(), reinterpret_cast<char*>(img.data.data()));
  return img;
}

Image read_f32(const json& a) {
  const std::vector<int64_t> s = a.at("shape").get<std::vector<int64_t>>();
  REQUIRE(s.size() == 3);
  Image img(s[0], s[1], s[2]);
  const std::vector<char> b = read_bytes(a);
  REQUIRE(b.size() == img.data.size() * sizeof(float));
  std::copy(b.begin(), b.end(), reinterpret_cast<char*>(img.data.data()));
  return img;
}

// Number of differing bytes (shapes must match).
int64_t byte_diffs(const pil::Image8& got, const pil::Image8& want) {
  REQUIRE(got.channels == want.channels);
  REQUIRE(got.height == want.height);
  REQUIRE(got.width == want.width);
  int64_t n = 0;
  for (size_t i = 0; i < want.data.size(); ++i) n += got.data[i] != want.data[i];
  return n;
}

float max_diff(const Image& got, const Image& want) {
  REQUIRE(got.channels == want.channels);
  REQUIRE(got.height == want.height);
  REQUIRE(got.width == want.width);
  float m = 0.f;
  for (size_t i = 0; i < want.data.size(); ++i) m = std::fmax(m, sima::testing::abs_diff(got.data[i], want.data[i]));
  return m;
}

pil::Resample filter_of(const std::string& name) {
  if (name == "nearest") return pil::Resample::Nearest;
  if (name == "bilinear") return pil::Resample::Bilinear;
  REQUIRE(name == "bicubic");
  return pil::Resample::Bicubic;
}

ModelConfig eval_model(const json& c, int64_t channels) {
  ModelConfig m;
  m.img_size = c.at("img_size").get<int64_t>();
  m.in_chans = channels;
  m.mean = c.at("mean").get<std::vector<float>>();
  m.std = c.at("std").get<std::vector<float>>();
  return m;
}

}  // namespace

TEST_CASE("pil::resize equals Pillow's Image.resize byte for byte (nearest, bilinear, bicubic)") {
  const json& cases = manifest().at("resize");
  REQUIRE(cases.size() >= 30);
  for (const json& c : cases) {
    const pil::Image8 in = read_u8(c.at("input")), want = read_u8(c.at("output"));
    CAPTURE(c.at("filter").get<std::string>());
    CAPTURE(in.channels);
    CAPTURE(in.height);
    CAPTURE(in.width);
    CAPTURE(want.height);
    CAPTURE(want.width);
    CHECK(byte_diffs(pil::resize(in, want.height, want.width, filter_of(c.at("filter"))), want) == 0);
  }
}

TEST_CASE("pil::center_crop equals torchvision CenterCrop (also larger than the image: zero padding)") {
  for (const json& c : manifest().at("crop")) {
    const pil::Image8 in = read_u8(c.at("input")), want = read_u8(c.at("output"));
    CAPTURE(in.height);
    CAPTURE(in.width);
    CHECK(byte_diffs(pil::center_crop(in, c.at("size")[0], c.at("size")[1]), want) == 0);
  }
}

TEST_CASE("eval_transform equals timm's eval transform on PIL images (bytes, then the tensor to 1e-6)") {
  for (const json& c : manifest().at("eval")) {
    const pil::Image8 in = read_u8(c.at("input"));
    const int64_t size = c.at("img_size").get<int64_t>();
    const auto scale = int64_t(std::floor(double(size) / c.at("crop_pct").get<double>()));
    CAPTURE(in.height);
    CAPTURE(in.width);
    CAPTURE(size);
    CAPTURE(c.at("crop_pct").get<double>());
    const pil::Image8 resized = pil::resize_shorter(in, scale, pil::Resample::Bicubic);
    CHECK(byte_diffs(resized, read_u8(c.at("resized"))) == 0);
    CHECK(byte_diffs(pil::center_crop(resized, size, size), read_u8(c.at("cropped"))) == 0);
    const Image want = read_f32(c.at("tensor"));
    const Image src = pil::from_uint8(in);  // as read_image decodes an 8-bit file: v / 255
    Generator unused(0);
    for (EvalResize mode : {EvalResize::Auto, EvalResize::Pil}) {
      CAPTURE(eval_resize_name(mode));
      // auto passes an image already img_size × img_size through
      // (train/config/transforms_factory.h): only pil is timm there.
      if (mode == EvalResize::Auto && in.height == size && in.width == size && c.at("crop_pct").get<double>() < 1) continue;
      CHECK(max_diff(eval_transform(eval_model(c, in.channels), c.at("crop_pct"), mode)(src, unused), want) <= 1e-6f);
    }
    // The float path is another resize (no antialiasing, float pixels): not timm's numbers
    // where a resize happens (the shorter side is not already floor(S / crop_pct)).
    const Image flt = eval_transform(eval_model(c, in.channels), c.at("crop_pct"), EvalResize::Float)(src, unused);
    if (std::min(in.height, in.width) != scale && !(in.height == size && in.width == size))
      CHECK(max_diff(flt, want) > 1e-3f);
  }
}

TEST_CASE("eval_transform: resize pil refuses images that are not 8-bit; auto takes the float path for them") {
  const json& c = manifest().at("eval").at(0);
  Image src = pil::from_uint8(read_u8(c.at("input")));
  src.data[7] += 0.4f / 255.f;  // off the 8-bit grid, as a 16-bit PNG sample would be
  CHECK_FALSE(pil::is_8bit(src));
  Generator unused(0);
  const ModelConfig m = eval_model(c, src.channels);
  CHECK_THROWS_WITH_AS(eval_transform(m, c.at("crop_pct"), EvalResize::Pil)(src, unused),
                       doctest::Contains("the image is not 8-bit"), Error);
  const Image a = eval_transform(m, c.at("crop_pct"), EvalResize::Auto)(src, unused);
  const Image f = eval_transform(m, c.at("crop_pct"), EvalResize::Float)(src, unused);
  CHECK(max_diff(a, f) == 0.f);
  CHECK_THROWS_WITH_AS(parse_eval_resize("antialias"), "eval resize: 'antialias' is not one of: auto, pil, float",
                       Error);
}

TEST_CASE("imagenet_class_names equals torchvision's ImageNet-1k categories") {
  const std::vector<std::string> want = manifest().at("classes").get<std::vector<std::string>>();
  REQUIRE(want.size() == 1000);
  const std::vector<std::string>& got = imagenet_class_names();
  REQUIRE(got.size() == 1000);
  for (size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i] == want[i]);
  }
}
