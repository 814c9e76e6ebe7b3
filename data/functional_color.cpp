// Colour ops on CHW float images in [0, 1]: greyscale, the four ColorJitter
// adjustments, solarize, normalize and the Gaussian blur, with torchvision's formulas.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "data/functional.h"

namespace sima::transforms::functional {

namespace {

void check_rgb_or_grey(const Image& img, const char* op) {
  check_image(img, op);
  check(img.channels == 1 || img.channels == 3, op, ": expects a 1- or 3-channel image, got ", img.channels,
        " channels");
}

// ITU-R 601-2 luma, the weights PIL's convert("L") uses.
inline float luma(float r, float g, float b) { return 0.299f * r + 0.587f * g + 0.114f * b; }

// The grey plane (H·W values) of an RGB or grey image.
std::vector<float> grey_plane(const Image& img) {
  const int64_t n = img.height * img.width;
  if (img.channels == 1) return img.data;
  std::vector<float> l(n);
  const float *r = img.data.data(), *g = r + n, *b = g + n;
  for (int64_t i = 0; i < n; ++i) l[i] = luma(r[i], g[i], b[i]);
  return l;
}

// torchvision _blend: clamp(f·a + (1 − f)·b, 0, 1).
inline float blend(float a, float b, float f) { return std::clamp(f * a + (1.f - f) * b, 0.f, 1.f); }

void check_factor(float f, const char* op) {
  check(std::isfinite(f) && f >= 0.f, op, ": factor ", f, " must be a non-negative number");
}

}  // namespace

Image rgb_to_grayscale(const Image& img, int64_t num_output_channels) {
  check_rgb_or_grey(img, "rgb_to_grayscale");
  check(num_output_channels == 1 || num_output_channels == 3,
        "rgb_to_grayscale: num_output_channels must be 1 or 3, got ", num_output_channels);
  const std::vector<float> l = grey_plane(img);
  Image out(num_output_channels, img.height, img.width);
  for (int64_t c = 0; c < num_output_channels; ++c) std::copy(l.begin(), l.end(), &out.at(c, 0, 0));
  return out;
}

Image to_three_channels(Image img) {
  check_image(img, "to_three_channels");
  if (img.channels == 3) return img;
  check(img.channels == 1, "to_three_channels: expects a 1- or 3-channel image, got ", img.channels,
        " channels");
  return rgb_to_grayscale(img, 3);
}

Image adjust_brightness(Image img, float factor) {
  check_image(img, "adjust_brightness");
  check_factor(factor, "adjust_brightness");
  for (float& v : img.data) v = blend(v, 0.f, factor);
  return img;
}

Image adjust_contrast(Image img, float factor) {
  check_rgb_or_grey(img, "adjust_contrast");
  check_factor(factor, "adjust_contrast");
  const std::vector<float> l = grey_plane(img);
  double sum = 0.0;
  for (float v : l) sum += v;
  const float mean = static_cast<float>(sum / static_cast<double>(l.size()));
  for (float& v : img.data) v = blend(v, mean, factor);
  return img;
}

Image adjust_saturation(Image img, float factor) {
  check_rgb_or_grey(img, "adjust_saturation");
  check_factor(factor, "adjust_saturation");
  if (img.channels == 1) return img;
  const std::vector<float> l = grey_plane(img);
  const int64_t n = img.height * img.width;
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t i = 0; i < n; ++i) img.data[c * n + i] = blend(img.data[c * n + i], l[i], factor);
  return img;
}

// torchvision's _rgb2hsv / _hsv2rgb, one pixel at a time:
//   v = max, s = (max − min)/max, h from the channel that is the max:
//   r: (bc − gc), g: 2 + rc − bc, b: 4 + gc − rc with xc = (max − x)/(max − min),
//   h = fmod(h/6 + 1, 1).
// Back: i = floor(6h), f = 6h − i, p = v(1 − s), q = v(1 − s·f), t = v(1 − s(1 − f)),
//   (r, g, b) = (v,t,p) (q,v,p) (p,v,t) (p,q,v) (t,p,v) (v,p,q) for i mod 6 = 0..5.
Image adjust_hue(Image img, float hue_factor) {
  check_rgb_or_grey(img, "adjust_hue");
  check(hue_factor >= -0.5f && hue_factor <= 0.5f, "adjust_hue: hue_factor ", hue_factor,
        " is not in [-0.5, 0.5]");
  if (img.channels == 1) return img;
  const int64_t n = img.height * img.width;
  float *R = img.data.data(), *G = R + n, *B = G + n;
  for (int64_t i = 0; i < n; ++i) {
    const float r = R[i], g = G[i], b = B[i];
    const float maxc = std::max({r, g, b}), minc = std::min({r, g, b});
    const bool eqc = maxc == minc;
    const float cr = maxc - minc;
    const float s = cr / (eqc ? 1.f : maxc);
    const float div = eqc ? 1.f : cr;
    const float rc = (maxc - r) / div, gc = (maxc - g) / div, bc = (maxc - b) / div;
    float h;
    if (maxc == r) h = bc - gc;
    else if (maxc == g) h = 2.f + rc - bc;
    else h = 4.f + gc - rc;
    h = std::fmod(h / 6.f + 1.f, 1.f);
    // shift, as torch's remainder: the result takes the divisor's sign, so it lands in [0, 1)
    h = h + hue_factor;
    h = h - std::floor(h);
    if (h >= 1.f) h = 0.f;
    const float v = maxc;
    const float fi = std::floor(h * 6.f);
    const float f = h * 6.f - fi;
    const int sector = ((static_cast<int>(fi) % 6) + 6) % 6;
    const float p = std::clamp(v * (1.f - s), 0.f, 1.f);
    const float q = std::clamp(v * (1.f - s * f), 0.f, 1.f);
    const float t = std::clamp(v * (1.f - s * (1.f - f)), 0.f, 1.f);
    const float rgb[6][3] = {{v, t, p}, {q, v, p}, {p, v, t}, {p, q, v}, {t, p, v}, {v, p, q}};
    R[i] = rgb[sector][0];
    G[i] = rgb[sector][1];
    B[i] = rgb[sector][2];
  }
  return img;
}

Image solarize(Image img, float threshold) {
  check_image(img, "solarize");
  check(std::isfinite(threshold), "solarize: threshold ", threshold, " is not a number");
  for (float& v : img.data)
    if (v >= threshold) v = 1.f - v;
  return img;
}

Image normalize(Image img, const std::vector<float>& mean, const std::vector<float>& std) {
  check_image(img, "normalize");
  auto per_channel_ok = [&](const std::vector<float>& v) {
    return v.size() == 1 || static_cast<int64_t>(v.size()) == img.channels;
  };
  check(per_channel_ok(mean) && per_channel_ok(std), "normalize: ", mean.size(), " means and ", std.size(),
        " stds for an image of ", img.channels, " channels");
  const int64_t n = img.height * img.width;
  for (int64_t c = 0; c < img.channels; ++c) {
    const float m = mean[mean.size() == 1 ? 0 : c], s = std[std.size() == 1 ? 0 : c];
    check(s != 0.f && std::isfinite(s) && std::isfinite(m), "normalize: std ", s, " / mean ", m,
          " of channel ", c, " is zero or not finite");
    float* p = img.data.data() + c * n;
    for (int64_t i = 0; i < n; ++i) p[i] = (p[i] - m) / s;
  }
  return img;
}

std::vector<float> gaussian_kernel1d(int64_t kernel_size, float sigma) {
  check(kernel_size > 0 && kernel_size % 2 == 1, "gaussian_blur: kernel_size ", kernel_size,
        " must be odd and positive");
  check(sigma > 0.f && std::isfinite(sigma), "gaussian_blur: sigma ", sigma, " must be positive");
  const float half = static_cast<float>(kernel_size - 1) * 0.5f;
  std::vector<float> k(kernel_size);
  float sum = 0.f;
  for (int64_t i = 0; i < kernel_size; ++i) {
    const float x = static_cast<float>(i) - half;  // linspace(−half, half, k): step 1 as k is odd
    k[i] = std::exp(-0.5f * (x / sigma) * (x / sigma));
    sum += k[i];
  }
  for (float& v : k) v /= sum;
  return k;
}

Image gaussian_blur(const Image& img, int64_t kernel_size, float sigma) {
  check_image(img, "gaussian_blur");
  const std::vector<float> k = gaussian_kernel1d(kernel_size, sigma);
  const int64_t r = kernel_size / 2, H = img.height, W = img.width;
  check(r < H && r < W, "gaussian_blur: reflect padding ", r, " (kernel_size ", kernel_size,
        ") must be smaller than the image size (", H, ", ", W, ")");
  // reflect: −i -> i, (n − 1) + i -> (n − 1) − i
  auto reflect = [](int64_t i, int64_t n) { return i < 0 ? -i : i >= n ? 2 * (n - 1) - i : i; };
  Image out(img.channels, H, W);
  std::vector<float> padded(W + 2 * r), tmp(H * W);
  for (int64_t c = 0; c < img.channels; ++c) {
    const float* in = img.data.data() + c * H * W;
    for (int64_t y = 0; y < H; ++y) {  // along x: one reflect-padded row, shifted copies weighted
      for (int64_t i = 0; i < W + 2 * r; ++i) padded[i] = in[y * W + reflect(i - r, W)];
      float* t = tmp.data() + y * W;
      std::fill(t, t + W, 0.f);
      for (int64_t j = 0; j < kernel_size; ++j) {
        const float kj = k[j];
        const float* p = padded.data() + j;
        for (int64_t x = 0; x < W; ++x) t[x] += kj * p[x];
      }
    }
    float* o = out.data.data() + c * H * W;
    for (int64_t y = 0; y < H; ++y) {  // along y: whole rows, weighted
      float* orow = o + y * W;
      std::fill(orow, orow + W, 0.f);
      for (int64_t j = 0; j < kernel_size; ++j) {
        const float* t = tmp.data() + reflect(y + j - r, H) * W;
        const float kj = k[j];
        for (int64_t x = 0; x < W; ++x) orow[x] += kj * t[x];
      }
    }
  }
  return out;
}

}  // namespace sima::transforms::functional
