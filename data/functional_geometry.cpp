// Geometry ops on CHW images: flip, crop, pad, resize (torchvision semantics).
//
// Resize is separable: along each axis, output index o reads a few input indices
// ("taps") with weights, and
//   out[c, oy, ox] = Σ_a wy[oy][a] · ( Σ_t wx[ox][t] · in[c, iy[oy][a], ix[ox][t]] )
// with 1 tap for nearest, 2 for bilinear, 4 for bicubic: the same formulas and the same
// float arithmetic as core/ops/interpolate.cpp (F.interpolate, align_corners=False), so the
// two agree bit for bit. It is written out here rather than called because a data-loader
// thread should not start an OpenMP team of its own for one image.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "data/functional.h"

#include "core/ops/interpolate.h"

namespace sima::transforms {

const char* interpolation_name(Interpolation mode) {
  switch (mode) {
    case Interpolation::Nearest: return "nearest";
    case Interpolation::Bilinear: return "bilinear";
    case Interpolation::Bicubic: return "bicubic";
  }
  return "?";
}

}  // namespace sima::transforms

namespace sima::transforms::functional {

namespace {
// Start of row y of channel c (Image::at returns a value on a const image).
const float* row_ptr(const Image& img, int64_t c, int64_t y) {
  return img.data.data() + (c * img.height + y) * img.width;
}
}  // namespace

void check_image(const Image& img, const char* op) {
  check(img.channels > 0 && img.height > 0 && img.width > 0, op, ": empty image (", img.channels, ", ",
        img.height, ", ", img.width, ")");
  check(static_cast<int64_t>(img.data.size()) == img.numel(), op, ": image of shape (", img.channels, ", ",
        img.height, ", ", img.width, ") holds ", img.data.size(), " values");
}

void check_output_size(int64_t height, int64_t width, const char* op) {
  check(height > 0 && width > 0 && height <= kMaxImageSide && width <= kMaxImageSide, op, ": size (", height, ", ",
        width, ") must be positive and at most ", kMaxImageSide);
}

Image hflip(Image img) {
  check_image(img, "hflip");
  for (int64_t c = 0; c < img.channels; ++c)
    for (int64_t y = 0; y < img.height; ++y) {
      float* row = &img.at(c, y, 0);
      std::reverse(row, row + img.width);
    }
  return img;
}

Image crop(const Image& img, int64_t top, int64_t left, int64_t height, int64_t width) {
  check_image(img, "crop");
  check_output_size(height, width, "crop");
  Image out(img.channels, height, width, 0.f);
  for (int64_t c = 0; c < img.channels; ++c)
    for (int64_t y = 0; y < height; ++y) {
      const int64_t sy = top + y;
      if (sy < 0 || sy >= img.height) continue;
      for (int64_t x = 0; x < width; ++x) {
        const int64_t sx = left + x;
        if (sx >= 0 && sx < img.width) out.at(c, y, x) = img.at(c, sy, sx);
      }
    }
  return out;
}

Image pad(const Image& img, int64_t left, int64_t top, int64_t right, int64_t bottom, float fill) {
  check_image(img, "pad");
  check(left >= 0 && top >= 0 && right >= 0 && bottom >= 0, "pad: padding (", left, ", ", top, ", ", right,
        ", ", bottom, ") must be non-negative");
  check_output_size(img.height + top + bottom, img.width + left + right, "pad");
  Image out(img.channels, img.height + top + bottom, img.width + left + right, fill);
  for (int64_t c = 0; c < img.channels; ++c)
    for (int64_t y = 0; y < img.height; ++y)
      std::copy_n(row_ptr(img, c, y), img.width, &out.at(c, y + top, left));
  return out;
}

namespace {
// The data-side enum onto core's: resize uses exactly interpolate()'s taps (align_corners off).
InterpMode interp_mode(Interpolation mode) {
  return mode == Interpolation::Nearest ? InterpMode::Nearest
         : mode == Interpolation::Bilinear ? InterpMode::Bilinear : InterpMode::Bicubic;
}
}  // namespace

Image resize(const Image& img, int64_t height, int64_t width, Interpolation mode) {
  check_image(img, "resize");
  check_output_size(height, width, "resize");
  const InterpTaps ty = interpolation_taps(img.height, height, interp_mode(mode));
  const InterpTaps tx = interpolation_taps(img.width, width, interp_mode(mode));
  const int ny = ty.taps, nx = tx.taps;
  // Two passes with the same arithmetic as the one-pixel formula: first every input row
  // resampled along x (r[iy][ox] = Σ_t wx·in), then s = Σ_a wy·r[iy_a][ox] in tap order.
  Image out(img.channels, height, width);
  std::vector<float> rows(img.height * width);
  for (int64_t c = 0; c < img.channels; ++c) {
    for (int64_t iy = 0; iy < img.height; ++iy) {
      const float* in = row_ptr(img, c, iy);
      float* r = rows.data() + iy * width;
      for (int64_t ox = 0; ox < width; ++ox) {
        float acc = 0.f;
        for (int t = 0; t < nx; ++t) acc += tx.w[ox * nx + t] * in[tx.idx[ox * nx + t]];
        r[ox] = acc;
      }
    }
    for (int64_t oy = 0; oy < height; ++oy) {
      float* o = out.data.data() + (c * height + oy) * width;
      std::fill(o, o + width, 0.f);
      for (int a = 0; a < ny; ++a) {
        const float wa = ty.w[oy * ny + a];
        const float* r = rows.data() + ty.idx[oy * ny + a] * width;
        for (int64_t ox = 0; ox < width; ++ox) o[ox] += wa * r[ox];
      }
    }
  }
  if (mode == Interpolation::Bicubic)
    for (float& v : out.data) v = std::clamp(v, 0.f, 1.f);
  return out;
}

Image resize_shorter(const Image& img, int64_t size, Interpolation mode) {
  check_image(img, "resize");
  check_output_size(size, size, "resize");
  const int64_t h = img.height, w = img.width;
  const int64_t s = std::min(h, w), l = std::max(h, w);
  const int64_t new_long = static_cast<int64_t>(static_cast<double>(size) * l / s);
  const int64_t oh = h <= w ? size : new_long, ow = h <= w ? new_long : size;
  if (oh == h && ow == w) return img;
  return resize(img, oh, ow, mode);
}

Image resized_crop(const Image& img, int64_t top, int64_t left, int64_t height, int64_t width,
                   int64_t out_h, int64_t out_w, Interpolation mode) {
  return resize(crop(img, top, left, height, width), out_h, out_w, mode);
}

Image center_crop(const Image& img, int64_t height, int64_t width) {
  check_image(img, "center_crop");
  check_output_size(height, width, "center_crop");
  if (height > img.height || width > img.width) {
    const int64_t ph = std::max<int64_t>(0, height - img.height), pw = std::max<int64_t>(0, width - img.width);
    return center_crop(pad(img, pw / 2, ph / 2, (pw + 1) / 2, (ph + 1) / 2, 0.f), height, width);
  }
  // Python's round(): half to even, which std::nearbyint does in the default rounding mode.
  const int64_t top = static_cast<int64_t>(std::nearbyint((img.height - height) / 2.0));
  const int64_t left = static_cast<int64_t>(std::nearbyint((img.width - width) / 2.0));
  return crop(img, top, left, height, width);
}

}  // namespace sima::transforms::functional
