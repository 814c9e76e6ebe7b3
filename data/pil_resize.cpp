// Pillow's 8-bit resize and torchvision's PIL-path Resize / CenterCrop (see pil_resize.h).
#include "data/pil_resize.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "data/functional.h"

// Pillow is compiled without fused multiply-adds: the filter weights below must round as its
// double arithmetic does (see pil_ops.cpp).
#include "core/fp_contract_off.h"

namespace sima::pil {

namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;  // Resample.c PRECISION_BITS: 8-bit result, 2 bits of overflow

void check_image8(const Image8& img, const char* op) {
  check(img.channels == 1 || img.channels == 3, op, ": expects a 1- or 3-channel image (PIL L or RGB), got ",
        img.channels, " channels");
  check(img.height > 0 && img.width > 0 &&
            static_cast<int64_t>(img.data.size()) == img.channels * img.height * img.width,
        op, ": image of shape (", img.channels, ", ", img.height, ", ", img.width, ") holds ", img.data.size(),
        " values");
}

// The filters of Resample.c: value at distance x (in input pixels / filter scale) and support.
double bilinear_filter(double x) {
  if (x < 0.0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}
double bicubic_filter(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

// One axis of in -> out pixels: output o reads inputs first[o] .. first[o] + count[o] − 1 with
// fixed-point weights k[o·ksize + i] (precompute_coeffs + normalize_coeffs_8bpc).
struct Coeffs {
  int64_t ksize = 0;
  std::vector<int64_t> first, count;
  std::vector<int32_t> k;
};

Coeffs precompute_coeffs(int64_t in_size, int64_t out_size, Resample resample) {
  double (*filter)(double) = resample == Resample::Bilinear ? bilinear_filter : bicubic_filter;
  const double filter_support = resample == Resample::Bilinear ? 1.0 : 2.0;
  const double scale = static_cast<double>(static_cast<float>(in_size)) / static_cast<double>(out_size);
  const double filterscale = std::max(scale, 1.0);
  const double support = filter_support * filterscale;
  Coeffs c;
  c.ksize = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  c.first.resize(size_t(out_size));
  c.count.resize(size_t(out_size));
  c.k.assign(size_t(out_size * c.ksize), 0);
  std::vector<double> w(size_t(c.ksize));
  for (int64_t o = 0; o < out_size; ++o) {
    const double centre = (static_cast<double>(o) + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    // C's (int) truncates toward zero; a negative start is clamped to 0 either way.
    const int64_t lo = std::max<int64_t>(static_cast<int>(centre - support + 0.5), 0);
    const int64_t hi = std::min<int64_t>(static_cast<int>(centre + support + 0.5), in_size);
    double sum = 0.0;
    for (int64_t i = 0; i < hi - lo; ++i) {
      w[size_t(i)] = filter((static_cast<double>(i + lo) - centre + 0.5) * ss);
      sum += w[size_t(i)];
    }
    for (int64_t i = 0; i < hi - lo; ++i) {
      const double wi = sum != 0.0 ? w[size_t(i)] / sum : w[size_t(i)];
      const double f = wi * (1 << kPrecisionBits);
      c.k[size_t(o * c.ksize + i)] = static_cast<int32_t>(wi < 0 ? -0.5 + f : 0.5 + f);  // truncation
    }
    c.first[size_t(o)] = lo;
    c.count[size_t(o)] = hi - lo;
  }
  return c;
}

// Resample.c clip8: the accumulator (with its rounding half already added) shifted down
// (arithmetic shift: floor) and clipped to 0..255.
inline uint8_t clip8(int32_t acc) { return static_cast<uint8_t>(std::clamp(acc >> kPrecisionBits, 0, 255)); }

// Horizontal pass over rows [row0, row0 + rows) of img: (C, rows, out_w).
Image8 resample_horizontal(const Image8& img, int64_t row0, int64_t rows, const Coeffs& c, int64_t out_w) {
  Image8 out(img.channels, rows, out_w);
  for (int64_t ch = 0; ch < img.channels; ++ch)
    for (int64_t y = 0; y < rows; ++y) {
      const uint8_t* in = &img.data[size_t((ch * img.height + row0 + y) * img.width)];
      for (int64_t x = 0; x < out_w; ++x) {
        const int32_t* k = &c.k[size_t(x * c.ksize)];
        const uint8_t* src = in + c.first[size_t(x)];
        int32_t acc = 1 << (kPrecisionBits - 1);
        for (int64_t i = 0; i < c.count[size_t(x)]; ++i) acc += int32_t(src[i]) * k[i];
        out.at(ch, y, x) = clip8(acc);
      }
    }
  return out;
}

// Vertical pass: output row y reads rows first[y] − row0 .. of img: (C, out_h, W).
Image8 resample_vertical(const Image8& img, int64_t row0, const Coeffs& c, int64_t out_h) {
  Image8 out(img.channels, out_h, img.width);
  for (int64_t ch = 0; ch < img.channels; ++ch)
    for (int64_t y = 0; y < out_h; ++y) {
      const int32_t* k = &c.k[size_t(y * c.ksize)];
      const int64_t top = c.first[size_t(y)] - row0;
      for (int64_t x = 0; x < img.width; ++x) {
        int32_t acc = 1 << (kPrecisionBits - 1);
        for (int64_t i = 0; i < c.count[size_t(y)]; ++i) acc += int32_t(img.at(ch, top + i, x)) * k[i];
        out.at(ch, y, x) = clip8(acc);
      }
    }
  return out;
}

// Geometry.c ImagingScaleAffine: source index per output index, the position accumulated.
std::vector<int64_t> nearest_index(int64_t in_size, int64_t out_size) {
  const double s = static_cast<double>(static_cast<float>(in_size)) / static_cast<double>(out_size);
  std::vector<int64_t> idx(static_cast<size_t>(out_size));
  double pos = s * 0.5;
  for (int64_t o = 0; o < out_size; ++o) {
    idx[size_t(o)] = std::clamp<int64_t>(pos < 0.0 ? -1 : static_cast<int>(pos), 0, in_size - 1);
    pos += s;
  }
  return idx;
}

Image8 resize_nearest(const Image8& img, int64_t height, int64_t width) {
  const std::vector<int64_t> ys = nearest_index(img.height, height), xs = nearest_index(img.width, width);
  Image8 out(img.channels, height, width);
  for (int64_t ch = 0; ch < img.channels; ++ch)
    for (int64_t y = 0; y < height; ++y)
      for (int64_t x = 0; x < width; ++x) out.at(ch, y, x) = img.at(ch, ys[size_t(y)], xs[size_t(x)]);
  return out;
}

}  // namespace

Image8 resize(const Image8& img, int64_t height, int64_t width, Resample resample) {
  check_image8(img, "pil::resize");
  transforms::functional::check_output_size(height, width, "pil::resize");
  if (height == img.height && width == img.width) return img;
  if (resample == Resample::Nearest) return resize_nearest(img, height, width);
  // ImagingResampleInner: the vertical coefficients first, to know which rows the horizontal
  // pass must produce (rows first[0] .. first[last] + count[last] − 1); then each pass only
  // when its side changes.
  const Coeffs cv = precompute_coeffs(img.height, height, resample);
  const int64_t row0 = cv.first.front(), row_end = cv.first.back() + cv.count.back();
  const bool need_h = width != img.width, need_v = height != img.height;
  if (!need_v) return resample_horizontal(img, 0, img.height, precompute_coeffs(img.width, width, resample), width);
  if (!need_h) return resample_vertical(img, 0, cv, height);
  const Coeffs ch = precompute_coeffs(img.width, width, resample);
  const Image8 tmp = resample_horizontal(img, row0, row_end - row0, ch, width);
  return resample_vertical(tmp, row0, cv, height);
}

Image8 resize_shorter(const Image8& img, int64_t size, Resample resample) {
  check_image8(img, "pil::resize_shorter");
  check(size > 0 && size <= transforms::functional::kMaxImageSide, "pil::resize_shorter: size ", size,
        " is not in 1..", transforms::functional::kMaxImageSide);
  const int64_t h = img.height, w = img.width;
  const int64_t s = std::min(h, w), l = std::max(h, w);
  // Python's int(size * long / short): a double quotient, truncated.
  const auto new_long = static_cast<int64_t>(static_cast<double>(size * l) / static_cast<double>(s));
  const int64_t new_h = w <= h ? new_long : size, new_w = w <= h ? size : new_long;
  return resize(img, new_h, new_w, resample);
}

Image8 center_crop(const Image8& img, int64_t height, int64_t width) {
  check_image8(img, "pil::center_crop");
  transforms::functional::check_output_size(height, width, "pil::center_crop");
  // Padding: (t − s) // 2 before, (t − s + 1) // 2 after, zeros; then the crop of the padded image.
  const int64_t pad_top = height > img.height ? (height - img.height) / 2 : 0;
  const int64_t pad_left = width > img.width ? (width - img.width) / 2 : 0;
  const int64_t H = std::max(height, img.height), W = std::max(width, img.width);
  const auto top = static_cast<int64_t>(std::nearbyint(static_cast<double>(H - height) / 2.0));
  const auto left = static_cast<int64_t>(std::nearbyint(static_cast<double>(W - width) / 2.0));
  Image8 out(img.channels, height, width);
  for (int64_t ch = 0; ch < img.channels; ++ch)
    for (int64_t y = 0; y < height; ++y) {
      const int64_t sy = top + y - pad_top;
      if (sy < 0 || sy >= img.height) continue;
      for (int64_t x = 0; x < width; ++x) {
        const int64_t sx = left + x - pad_left;
        if (sx >= 0 && sx < img.width) out.at(ch, y, x) = img.at(ch, sy, sx);
      }
    }
  return out;
}

bool is_8bit(const Image& img) {
  for (float v : img.data) {
    const float k = v * 255.f;
    if (!(k >= -1e-3f && k <= 255.001f && std::fabs(k - std::nearbyint(k)) <= 1e-3f)) return false;
  }
  return true;
}

}  // namespace sima::pil
