// Deterministic image operations on float CHW images in [0, 1], as
// torchvision.transforms.functional computes them on float tensors. The random
// transforms in data/transforms.h draw their parameters and call these.
//
// Images are taken by value: pass std::move(img) and pointwise ops work in place.
// Every op checks its image (consistent sizes, channel count it needs) and its
// arguments, and throws sima::Error naming the op and the fault.
#pragma once
#include <cstdint>
#include <vector>

#include "data/image.h"

namespace sima::transforms {

// torchvision's InterpolationMode, for the modes we implement (antialias is always off).
enum class Interpolation { Nearest, Bilinear, Bicubic };
const char* interpolation_name(Interpolation mode);

}  // namespace sima::transforms

namespace sima::transforms::functional {

// Throws unless img is non-empty with data.size() == C·H·W.
void check_image(const Image& img, const char* op);
// The largest side an op produces (a guard against sizes that would exhaust memory).
constexpr int64_t kMaxImageSide = 1 << 16;
// Throws unless 0 < height, width <= kMaxImageSide, naming the op.
void check_output_size(int64_t height, int64_t width, const char* op);

// ---- geometry (functional_geometry.cpp) -------------------------------------
// Mirror left-right: out[c, y, x] = in[c, y, W − 1 − x].
Image hflip(Image img);
// out[c, y, x] = in[c, top + y, left + x]; positions outside the image read 0
// (torchvision pads a crop box that leaves the image).
Image crop(const Image& img, int64_t top, int64_t left, int64_t height, int64_t width);
// Constant padding with `fill` on each side.
Image pad(const Image& img, int64_t left, int64_t top, int64_t right, int64_t bottom, float fill = 0.f);
// F.interpolate(align_corners=False, antialias=False) to (height, width): source index
// of output o along an axis is (o + 0.5)·in/out − 0.5; bilinear takes 2 border-clamped
// taps, bicubic 4 (Keys, A = −0.75), nearest floor(o·in/out). Bicubic results are
// clamped to [0, 1] (as PIL and torchvision's uint8 path do) so images stay in range.
Image resize(const Image& img, int64_t height, int64_t width, Interpolation mode);
// torchvision Resize(size) with one int: the shorter side becomes `size`, the longer
// int(size · long / short).
Image resize_shorter(const Image& img, int64_t size, Interpolation mode);
// crop, then resize to (out_h, out_w).
Image resized_crop(const Image& img, int64_t top, int64_t left, int64_t height, int64_t width,
                   int64_t out_h, int64_t out_w, Interpolation mode);
// Crop of (height, width) at top = round((H − height)/2), left = round((W − width)/2)
// (round half to even as Python); a crop larger than the image is zero-padded first,
// (w − W)//2 on the left/top, the rest on the right/bottom.
Image center_crop(const Image& img, int64_t height, int64_t width);

// ---- colour (functional_color.cpp) ------------------------------------------
// Greyscale l = 0.299·R + 0.587·G + 0.114·B (ITU-R 601-2, as PIL), repeated over
// num_output_channels (1 or 3). A 1-channel image is already grey: only repeated.
Image rgb_to_grayscale(const Image& img, int64_t num_output_channels);
// Grey -> RGB by repeating the channel; 3-channel images pass unchanged.
Image to_three_channels(Image img);
// The blends below follow torchvision's _blend(a, b, f) = clamp(f·a + (1 − f)·b, 0, 1):
//   brightness: b = 0                      -> clamp(f·x)
//   contrast:   b = mean of the grey image -> clamp(f·x + (1 − f)·mean)
//   saturation: b = grey image             (identity on 1-channel images)
Image adjust_brightness(Image img, float factor);
Image adjust_contrast(Image img, float factor);
Image adjust_saturation(Image img, float factor);
// RGB -> HSV, h <- (h + hue_factor) mod 1, HSV -> RGB; hue_factor in [−0.5, 0.5].
// Identity on 1-channel images.
Image adjust_hue(Image img, float hue_factor);
// x >= threshold -> 1 − x (torchvision solarize with bound 1).
Image solarize(Image img, float threshold);
// (x − mean[c]) / std[c]; mean and std have one value per channel (or one for all).
Image normalize(Image img, const std::vector<float>& mean, const std::vector<float>& std);

// torchvision's Gaussian kernel: x_i = linspace(−(k−1)/2, (k−1)/2, k),
// w_i = exp(−x_i²/(2σ²)) / Σ_j exp(−x_j²/(2σ²)). kernel_size odd and positive, σ > 0.
std::vector<float> gaussian_kernel1d(int64_t kernel_size, float sigma);
// Separable blur with that kernel along x then y, reflect padding by kernel_size/2
// (index −1 reads 1, index W reads W − 2); the padding must be smaller than H and W.
Image gaussian_blur(const Image& img, int64_t kernel_size, float sigma);

}  // namespace sima::transforms::functional
