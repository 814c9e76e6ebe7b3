// The PIL operations timm's RandAugment applies, on 8-bit images, computed as Pillow
// computes them (its lookup tables, integer greyscale, truncating blends, affine filters),
// so an augmented image matches what timm would have fed the model up to Pillow's
// floating-point details.
//
// RandAugment (data/rand_augment.h) quantises a float image to 0..255 once, applies its
// ops here, and converts back: the quantisation after each op is part of the recipe.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "data/image.h"

namespace sima::pil {

// An 8-bit image, CHW like Image (PIL interleaves RGB; no op here depends on the layout).
struct Image8 {
  int64_t channels = 0, height = 0, width = 0;
  std::vector<uint8_t> data;

  Image8() = default;
  Image8(int64_t c, int64_t h, int64_t w, uint8_t fill = 0) : channels(c), height(h), width(w), data(c * h * w, fill) {}
  uint8_t& at(int64_t c, int64_t y, int64_t x) { return data[(c * height + y) * width + x]; }
  uint8_t at(int64_t c, int64_t y, int64_t x) const { return data[(c * height + y) * width + x]; }
  int64_t plane() const { return height * width; }
};

// round(clamp(x, 0, 1)·255) and back (v / 255). Only 1- and 3-channel images (PIL's L and RGB).
Image8 to_uint8(const Image& img);
Image from_uint8(const Image8& img);

// ---- point ops (ImageOps) ---------------------------------------------------
Image8 invert(Image8 img);                  // 255 − v
Image8 posterize(Image8 img, int bits);     // v & ~(2^(8 − bits) − 1), bits in 0..8
Image8 solarize(Image8 img, int threshold);  // v >= threshold -> 255 − v
// timm's solarize_add: v < threshold -> min(255, v + add)
Image8 solarize_add(Image8 img, int add, int threshold = 128);
// Per channel: lo, hi = smallest and largest value present; if hi > lo,
// v -> clamp(int(v·255/(hi − lo) − lo·255/(hi − lo)), 0, 255).
Image8 autocontrast(Image8 img);
// Per channel, with h the histogram: step = (Σh − h[last non-zero value]) // 256; if the
// channel has more than one value and step > 0, v -> (step//2 + Σ_{i<v} h[i]) // step.
Image8 equalize(Image8 img);

// ---- ImageEnhance: blend(degenerate, img, factor) ---------------------------
// convert("L"): (19595·R + 38470·G + 7471·B + 2^15) >> 16; a 1-channel image is returned as is.
Image8 grayscale(const Image8& img);
// Image.blend: a + α·(b − a), truncated to an integer; clipped to 0..255 when α is outside [0, 1].
Image8 blend(const Image8& a, const Image8& b, float alpha);
Image8 enhance_color(const Image8& img, float factor);       // degenerate = greyscale
Image8 enhance_contrast(const Image8& img, float factor);    // = mean of greyscale, int(m + 0.5)
Image8 enhance_brightness(const Image8& img, float factor);  // = black
// degenerate = ImageFilter.SMOOTH (3×3 kernel [1 1 1; 1 5 1; 1 1 1]/13, rounded; the border
// pixels copied unchanged).
Image8 enhance_sharpness(const Image8& img, float factor);

// ---- geometry (Image.transform(AFFINE) / Image.rotate) ----------------------
enum class Resample { Nearest, Bilinear, Bicubic };
// Output pixel (x, y) samples the input at
//   (a·(x + ½) + b·(y + ½) + c,  d·(x + ½) + e·(y + ½) + f)   (m = {a, b, c, d, e, f});
// a point outside [0, W) × [0, H) gives `fill` (one value per channel, or one for all).
// Bilinear and bicubic (Pillow's cubic, a = −0.5) clamp their taps to the border and
// truncate; nearest takes the pixel containing the point.
Image8 affine(const Image8& img, const std::array<double, 6>& m, Resample resample, const std::vector<uint8_t>& fill);
// Image.rotate(degrees): counter-clockwise about the centre (W/2, H/2), same size.
Image8 rotate(const Image8& img, double degrees, Resample resample, const std::vector<uint8_t>& fill);

}  // namespace sima::pil
