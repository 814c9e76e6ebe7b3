// Pillow's 8-bit ops as timm's RandAugment uses them (see pil_ops.h for the formulas).
#include "data/pil_ops.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

// Pillow's C code is compiled without fused multiply-adds; contracting a·b + c into one
// rounding (as -march=native allows) moves a truncated value by 1 now and then (3 of 663 in a
// bilinear translation). Off here, so the results match Pillow's exactly.
#include "core/fp_contract_off.h"

namespace sima::pil {

namespace {

void check_image8(const Image8& img, const char* op) {
  check(img.channels > 0 && img.height > 0 && img.width > 0, op, ": empty image");
  check(static_cast<int64_t>(img.data.size()) == img.channels * img.height * img.width, op, ": image of shape (",
        img.channels, ", ", img.height, ", ", img.width, ") holds ", img.data.size(), " values");
}

// The histogram of channel c.
std::array<int64_t, 256> histogram(const Image8& img, int64_t c) {
  std::array<int64_t, 256> h{};
  const uint8_t* p = img.data.data() + c * img.plane();
  for (int64_t i = 0; i < img.plane(); ++i) ++h[p[i]];
  return h;
}

uint8_t clip8(double v) { return v <= 0.0 ? 0 : v >= 255.0 ? 255 : static_cast<uint8_t>(v); }

}  // namespace

Image8 to_uint8(const Image& img) {
  check(img.channels == 1 || img.channels == 3, "to_uint8: expects a 1- or 3-channel image, got ", img.channels,
        " channels");
  check(static_cast<int64_t>(img.data.size()) == img.numel() && img.height > 0 && img.width > 0,
        "to_uint8: image of shape (", img.channels, ", ", img.height, ", ", img.width, ") holds ", img.data.size(),
        " values");
  Image8 out(img.channels, img.height, img.width);
  for (size_t i = 0; i < img.data.size(); ++i) {
    const float v = std::isnan(img.data[i]) ? 0.f : std::clamp(img.data[i], 0.f, 1.f);
    out.data[i] = static_cast<uint8_t>(std::lround(v * 255.f));
  }
  return out;
}

Image from_uint8(const Image8& img) {
  Image out(img.channels, img.height, img.width);
  for (size_t i = 0; i < img.data.size(); ++i) out.data[i] = static_cast<float>(img.data[i]) / 255.f;
  return out;
}

// ---- point ops --------------------------------------------------------------

Image8 invert(Image8 img) {
  for (uint8_t& v : img.data) v = static_cast<uint8_t>(255 - v);
  return img;
}

Image8 posterize(Image8 img, int bits) {
  check(bits >= 0 && bits <= 8, "posterize: bits ", bits, " is not in 0..8");
  const int mask = ~((1 << (8 - bits)) - 1);
  for (uint8_t& v : img.data) v = static_cast<uint8_t>(v & mask);
  return img;
}

Image8 solarize(Image8 img, int threshold) {
  for (uint8_t& v : img.data)
    if (v >= threshold) v = static_cast<uint8_t>(255 - v);
  return img;
}

Image8 solarize_add(Image8 img, int add, int threshold) {
  for (uint8_t& v : img.data)
    if (v < threshold) v = static_cast<uint8_t>(std::clamp(v + add, 0, 255));
  return img;
}

Image8 autocontrast(Image8 img) {
  check_image8(img, "autocontrast");
  for (int64_t c = 0; c < img.channels; ++c) {
    const auto h = histogram(img, c);
    int lo = 0, hi = 255;
    while (lo < 255 && h[lo] == 0) ++lo;
    while (hi > 0 && h[hi] == 0) --hi;
    if (hi <= lo) continue;  // one value: left alone
    const double scale = 255.0 / (hi - lo), offset = -lo * scale;
    std::array<uint8_t, 256> lut;
    for (int i = 0; i < 256; ++i)
      lut[i] = static_cast<uint8_t>(std::clamp(static_cast<int>(i * scale + offset), 0, 255));
    uint8_t* p = img.data.data() + c * img.plane();
    for (int64_t i = 0; i < img.plane(); ++i) p[i] = lut[p[i]];
  }
  return img;
}

Image8 equalize(Image8 img) {
  check_image8(img, "equalize");
  for (int64_t c = 0; c < img.channels; ++c) {
    const auto h = histogram(img, c);
    int64_t total = 0, last = 0, distinct = 0;
    for (int i = 0; i < 256; ++i)
      if (h[i]) {
        total += h[i];
        last = h[i];
        ++distinct;
      }
    if (distinct <= 1) continue;
    const int64_t step = (total - last) / 256;
    if (step == 0) continue;
    std::array<uint8_t, 256> lut;
    int64_t n = step / 2;
    for (int i = 0; i < 256; ++i) {
      lut[i] = static_cast<uint8_t>(std::min<int64_t>(n / step, 255));
      n += h[i];
    }
    uint8_t* p = img.data.data() + c * img.plane();
    for (int64_t i = 0; i < img.plane(); ++i) p[i] = lut[p[i]];
  }
  return img;
}

// ---- ImageEnhance -----------------------------------------------------------

Image8 grayscale(const Image8& img) {
  check_image8(img, "grayscale");
  if (img.channels == 1) return img;
  check(img.channels == 3, "grayscale: expects a 1- or 3-channel image, got ", img.channels, " channels");
  Image8 out(1, img.height, img.width);
  const int64_t n = img.plane();
  const uint8_t *r = img.data.data(), *g = r + n, *b = g + n;
  for (int64_t i = 0; i < n; ++i)
    out.data[i] = static_cast<uint8_t>((r[i] * 19595 + g[i] * 38470 + b[i] * 7471 + 0x8000) >> 16);
  return out;
}

Image8 blend(const Image8& a, const Image8& b, float alpha) {
  check(a.channels == b.channels && a.height == b.height && a.width == b.width, "blend: images differ in shape");
  Image8 out(a.channels, a.height, a.width);
  const bool interpolate = alpha >= 0.f && alpha <= 1.f;
  for (size_t i = 0; i < a.data.size(); ++i) {
    const float v = static_cast<float>(a.data[i]) + alpha * (static_cast<int>(b.data[i]) - static_cast<int>(a.data[i]));
    out.data[i] = interpolate ? static_cast<uint8_t>(v) : clip8(v);
  }
  return out;
}

namespace {
// A 1-channel image repeated to `channels` channels (PIL's convert("L").convert("RGB")).
Image8 repeat_channels(const Image8& grey, int64_t channels) {
  Image8 out(channels, grey.height, grey.width);
  for (int64_t c = 0; c < channels; ++c)
    std::copy(grey.data.begin(), grey.data.end(), out.data.begin() + c * grey.plane());
  return out;
}
}  // namespace

Image8 enhance_color(const Image8& img, float factor) {
  return blend(repeat_channels(grayscale(img), img.channels), img, factor);
}

Image8 enhance_contrast(const Image8& img, float factor) {
  const Image8 l = grayscale(img);
  double sum = 0.0;
  for (uint8_t v : l.data) sum += v;
  const int mean = static_cast<int>(sum / static_cast<double>(l.data.size()) + 0.5);
  return blend(Image8(img.channels, img.height, img.width, static_cast<uint8_t>(mean)), img, factor);
}

Image8 enhance_brightness(const Image8& img, float factor) {
  check_image8(img, "enhance_brightness");
  return blend(Image8(img.channels, img.height, img.width, 0), img, factor);
}

Image8 enhance_sharpness(const Image8& img, float factor) {
  check_image8(img, "enhance_sharpness");
  Image8 smooth = img;  // border rows and columns stay as they are
  const float k_centre = 5.f / 13.f, k_side = 1.f / 13.f;
  for (int64_t c = 0; c < img.channels; ++c)
    for (int64_t y = 1; y + 1 < img.height; ++y)
      for (int64_t x = 1; x + 1 < img.width; ++x) {
        float s = 0.5f;  // Pillow adds 0.5 once so the truncation rounds
        for (int dy = -1; dy <= 1; ++dy)
          for (int dx = -1; dx <= 1; ++dx)
            s += img.at(c, y + dy, x + dx) * (dy == 0 && dx == 0 ? k_centre : k_side);
        smooth.at(c, y, x) = clip8(s);
      }
  return blend(smooth, img, factor);
}

// ---- geometry ---------------------------------------------------------------

namespace {

// Pillow's cubic through v1..v4 at d in [0, 1) (Catmull-Rom, a = −0.5).
inline double cubic(double v1, double v2, double v3, double v4, double d) {
  const double p1 = v2, p2 = -v1 + v3, p3 = 2 * (v1 - v2) + v3 - v4, p4 = -v1 + v2 - v3 + v4;
  return p1 + d * (p2 + d * (p3 + d * p4));
}

// One output value of channel c sampled at input point (xin, yin), inside the image.
uint8_t sample(const Image8& im, int64_t c, double xin, double yin, Resample resample) {
  const int64_t W = im.width, H = im.height;
  auto xclip = [W](int64_t x) { return std::clamp<int64_t>(x, 0, W - 1); };
  auto yclip = [H](int64_t y) { return std::clamp<int64_t>(y, 0, H - 1); };
  if (resample == Resample::Nearest) return im.at(c, static_cast<int64_t>(yin), static_cast<int64_t>(xin));
  xin -= 0.5;
  yin -= 0.5;
  const int64_t x = static_cast<int64_t>(std::floor(xin)), y = static_cast<int64_t>(std::floor(yin));
  const double dx = xin - x, dy = yin - y;
  if (resample == Resample::Bilinear) {
    auto row = [&](int64_t yy) {
      const double a = im.at(c, yy, xclip(x)), b = im.at(c, yy, xclip(x + 1));
      return a + (b - a) * dx;
    };
    const double v1 = row(yclip(y));
    const double v2 = (y + 1 >= 0 && y + 1 < H) ? row(y + 1) : v1;
    return static_cast<uint8_t>(v1 + (v2 - v1) * dy);
  }
  // bicubic: rows y − 1 .. y + 2; the first clamped, the others repeat the previous row outside
  auto row = [&](int64_t yy) {
    return cubic(im.at(c, yy, xclip(x - 1)), im.at(c, yy, xclip(x)), im.at(c, yy, xclip(x + 1)),
                 im.at(c, yy, xclip(x + 2)), dx);
  };
  double v[4];
  v[0] = row(yclip(y - 1));
  for (int k = 1; k < 4; ++k) v[k] = (y - 1 + k >= 0 && y - 1 + k < H) ? row(y - 1 + k) : v[k - 1];
  return clip8(cubic(v[0], v[1], v[2], v[3], dy));
}

}  // namespace

Image8 affine(const Image8& img, const std::array<double, 6>& m, Resample resample, const std::vector<uint8_t>& fill) {
  check_image8(img, "affine");
  check(fill.size() == 1 || static_cast<int64_t>(fill.size()) == img.channels, "affine: ", fill.size(),
        " fill values for an image of ", img.channels, " channels");
  Image8 out(img.channels, img.height, img.width);
  for (int64_t y = 0; y < img.height; ++y)
    for (int64_t x = 0; x < img.width; ++x) {
      const double xo = x + 0.5, yo = y + 0.5;
      const double xin = m[0] * xo + m[1] * yo + m[2], yin = m[3] * xo + m[4] * yo + m[5];
      const bool inside = xin >= 0.0 && xin < img.width && yin >= 0.0 && yin < img.height;
      for (int64_t c = 0; c < img.channels; ++c)
        out.at(c, y, x) = inside ? sample(img, c, xin, yin, resample) : fill[fill.size() == 1 ? 0 : c];
    }
  return out;
}

Image8 rotate(const Image8& img, double degrees, Resample resample, const std::vector<uint8_t>& fill) {
  check(std::isfinite(degrees), "rotate: angle ", degrees, " is not a number");
  // Image.rotate: the inverse map about the centre, in input coordinates
  //   in − centre = R(−θ)·(out − centre), with cos, sin rounded to 15 decimals as Pillow does.
  const double angle = -degrees * M_PI / 180.0;
  auto r15 = [](double v) { return std::round(v * 1e15) / 1e15; };
  const double a = r15(std::cos(angle)), b = r15(std::sin(angle)), d = r15(-std::sin(angle)), e = r15(std::cos(angle));
  const double cx = img.width / 2.0, cy = img.height / 2.0;
  const std::array<double, 6> m = {a, b, a * -cx + b * -cy + cx, d, e, d * -cx + e * -cy + cy};
  return affine(img, m, resample, fill);
}

}  // namespace sima::pil
