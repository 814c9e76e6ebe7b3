// Image transforms with torchvision's names and semantics (timm's for random erasing).
//
// Each function returns a Transform (data/dataset.h): a function Image -> Image that draws
// any randomness from the sample's Generator, so the same seed gives the same image. They
// run on float CHW images in [0, 1] (after ToTensor) and compose:
//
//   using namespace sima::transforms;
//   Transform t = compose({random_resized_crop(224, {.interpolation = Interpolation::Bicubic}),
//                          horizontal_flip(), normalize(kImageNetMean, kImageNetStd),
//                          random_erasing({.probability = 0.25})});
//
// Options are checked when the transform is built; the image when it is applied. Both throw
// sima::Error naming the transform and the fault. The deterministic ops they apply live in
// data/functional.h.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "data/dataset.h"
#include "data/functional.h"

namespace sima::transforms {

inline const std::vector<float> kImageNetMean = {0.485f, 0.456f, 0.406f};
inline const std::vector<float> kImageNetStd = {0.229f, 0.224f, 0.225f};

// Applies the transforms in order.
Transform compose(std::vector<Transform> transforms);
// RandomApply: applies t when u <= p for u ~ U[0, 1) (torchvision skips when p < u).
Transform random_apply(Transform t, double p);

// ---- geometry ---------------------------------------------------------------
// Resize(size): the shorter side to `size`, keeping the aspect ratio.
Transform resize(int64_t size, Interpolation mode = Interpolation::Bilinear);
// Resize((height, width)).
Transform resize(int64_t height, int64_t width, Interpolation mode = Interpolation::Bilinear);
Transform center_crop(int64_t size);
Transform center_crop(int64_t height, int64_t width);
// RandomCrop(size, padding, fill) with a square crop: pads every side by `padding` with `fill`, then crops at
// top ~ U{0 .. H − h}, left ~ U{0 .. W − w}. An image smaller than the crop is an error.
Transform random_crop(int64_t size, int64_t padding = 0, float fill = 0.f);

struct RandomResizedCropOptions {
  std::pair<double, double> scale{0.08, 1.0};           // of the image area
  std::pair<double, double> ratio{3.0 / 4.0, 4.0 / 3.0};  // width / height
  Interpolation interpolation = Interpolation::Bilinear;
};
struct CropBox {
  int64_t top = 0, left = 0, height = 0, width = 0;
};
// torchvision RandomResizedCrop.get_params: up to 10 attempts of
//   area ~ U[scale]·H·W, r = exp(U[log ratio]), w = round(√(area·r)), h = round(√(area/r)),
// accepted when 0 < w <= W and 0 < h <= H, then top ~ U{0 .. H − h}, left ~ U{0 .. W − w};
// otherwise the fallback: the whole image with its ratio clamped into [ratio], centred.
CropBox random_resized_crop_params(int64_t height, int64_t width, std::pair<double, double> scale,
                                   std::pair<double, double> ratio, Generator& gen);
Transform random_resized_crop(int64_t size, const RandomResizedCropOptions& options = {});
Transform random_resized_crop(int64_t height, int64_t width, const RandomResizedCropOptions& options = {});
// RandomHorizontalFlip: mirrors when u < p.
Transform horizontal_flip(double p = 0.5);

// ---- colour -----------------------------------------------------------------
// ColorJitter: a random order of the four adjustments (torch.randperm(4)), with factors
// brightness, contrast, saturation ~ U[max(0, 1 − v), 1 + v] and hue ~ U[−v, v]
// (v <= 0.5); a zero strength leaves that adjustment out and draws nothing for it.
Transform color_jitter(float brightness, float contrast = 0.f, float saturation = 0.f, float hue = 0.f);
// Grayscale(num_output_channels): 0.299·R + 0.587·G + 0.114·B.
Transform grayscale(int64_t num_output_channels = 1);
// RandomGrayscale(p): greyscale keeping the channel count, when u < p.
Transform random_grayscale(double p = 0.1);
// GaussianBlur(kernel_size, sigma): σ ~ U[sigma_min, sigma_max] per image.
Transform gaussian_blur(int64_t kernel_size, float sigma_min = 0.1f, float sigma_max = 2.0f);
// RandomSolarize(threshold, p): x >= threshold -> 1 − x, when u < p.
Transform solarize(float threshold, double p = 0.5);
// Normalize(mean, std): (x − mean[c]) / std[c].
Transform normalize(std::vector<float> mean, std::vector<float> std);
// Grey -> 3 channels by repetition (3-channel images unchanged).
Transform to_three_channels();

// ---- timm RandomErasing -----------------------------------------------------
enum class EraseMode {
  Const,  // zeros
  Rand,   // one N(0, 1) value per channel
  Pixel,  // N(0, 1) per value (timm 'pixel', the DeiT recipe)
};
struct RandomErasingOptions {
  double probability = 0.5;
  std::pair<double, double> scale{0.02, 1.0 / 3.0};  // erased fraction of the area
  std::pair<double, double> ratio{0.3, 1.0 / 0.3};   // aspect h / w, sampled log-uniformly
  EraseMode mode = EraseMode::Pixel;
  int64_t min_count = 1, max_count = 1;  // boxes per image
};
// timm RandomErasing (after Normalize, so N(0, 1) noise matches the data): with probability p,
// count ~ U{min_count .. max_count} boxes, each from up to 10 attempts of
//   area ~ U[scale]·H·W / count, r = exp(U[log ratio]), h = round(√(area·r)), w = round(√(area/r)),
// accepted when h < H and w < W, at top ~ U{0 .. H − h}, left ~ U{0 .. W − w}.
Transform random_erasing(const RandomErasingOptions& options = {});

}  // namespace sima::transforms
