// DINO's multi-crop augmentation (DataAugmentationDINO in facebookresearch/dino) and the
// batching of its views by resolution.
//
// Every sample gives 2 global views and M local views of one image:
//   global 1: RandomResizedCrop(global_size, scale (0.4, 1), bicubic), flip_and_color_jitter,
//             GaussianBlur p 1.0, normalize
//   global 2: the same crop and jitter, GaussianBlur p 0.1, Solarization p 0.2, normalize
//   local:    RandomResizedCrop(local_size, scale (0.05, 0.4), bicubic), flip_and_color_jitter,
//             GaussianBlur p 0.5, normalize
// flip_and_color_jitter = flip p 0.5, ColorJitter(0.4, 0.4, 0.2, 0.1) with p 0.8, grayscale p 0.2.
// Solarization is PIL's at threshold 128: x >= 128/255 -> 1 − x.
//
// Blur: torchvision's GaussianBlur (a sampled Gaussian kernel, as newer DINO-style code
// uses), σ ~ U[0.1, 2.0], not the original code's PIL GaussianBlur(radius = σ). Its kernel is
// 23 at 224 pixels and scales with the crop: k = odd round(23·size/224), at least 3, at most
// 2·size − 1 (so 9 for 96-pixel local crops, 3 for 28- or 12-pixel crops). σ is in pixels
// (not scaled) unless blur_sigma_reference is set: then blur_sigma is the range for a crop of
// that side and each view's σ is scaled by its side / blur_sigma_reference (224: DINO's σ scaled
// to the crop, [0.1, 2] -> [0.0125, 0.25] at 28 pixels, [0.0054, 0.107] at 12).
//
// The views of a batch are stacked per resolution group, view-major, as DINO's loader and
// MultiCropWrapper see them: rows [v·B, (v + 1)·B) of a group hold view v of every sample.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"
#include "data/batch.h"
#include "data/image.h"
#include "data/transforms.h"

namespace sima {

struct MultiCropOptions {
  int64_t global_size = 224;
  int64_t local_size = 96;
  int64_t local_crops = 8;  // M (DINO's local_crops_number); the global views are always 2
  std::pair<double, double> global_scale{0.4, 1.0};
  std::pair<double, double> local_scale{0.05, 0.4};
  transforms::Interpolation interpolation = transforms::Interpolation::Bicubic;
  double flip_p = 0.5;
  float brightness = 0.4f, contrast = 0.4f, saturation = 0.2f, hue = 0.1f;
  double color_jitter_p = 0.8;
  double grayscale_p = 0.2;
  std::pair<float, float> blur_sigma{0.1f, 2.0f};
  int64_t blur_sigma_reference = 0;  // 0: blur_sigma in pixels; N: for an N-pixel crop, scaled (above)
  int64_t global_blur_kernel = 0;  // 0: scaled from the crop size (see above)
  int64_t local_blur_kernel = 0;
  double global1_blur_p = 1.0, global2_blur_p = 0.1, local_blur_p = 0.5;
  double solarize_p = 0.2;  // global view 2 only
  float solarize_threshold = 128.f / 255.f;
  // Normalisation after the augmentations; empty: none.
  std::vector<float> mean = transforms::kImageNetMean;
  std::vector<float> std = transforms::kImageNetStd;
  bool to_three_channels = false;  // repeat a grey image to RGB first (so jitter and grayscale act)
};

// The σ range of the blur of a `crop_size` view: o.blur_sigma, scaled by crop_size / reference
// when o.blur_sigma_reference > 0.
std::pair<float, float> scaled_blur_sigma(const MultiCropOptions& o, int64_t crop_size);

// The blur kernel DINO's 23-at-224 becomes at `crop_size`: odd round(23·size/224) in [3, 2·size − 1].
int64_t scaled_blur_kernel(int64_t crop_size);

struct MultiCropViews {
  std::vector<Image> global_crops;  // 2 views, global_size²
  std::vector<Image> local_crops;   // local_crops views, local_size²
};

class DataAugmentationDINO {
 public:
  explicit DataAugmentationDINO(const MultiCropOptions& options = {});
  // All views of one image; every random draw comes from `gen`, in the order global 1,
  // global 2, local 1 .. M.
  MultiCropViews operator()(const Image& image, Generator& gen) const;

  const MultiCropOptions& options() const { return options_; }
  int64_t global_blur_kernel() const { return global_kernel_; }
  int64_t local_blur_kernel() const { return local_kernel_; }
  std::pair<float, float> global_blur_sigma() const { return scaled_blur_sigma(options_, options_.global_size); }
  std::pair<float, float> local_blur_sigma() const { return scaled_blur_sigma(options_, options_.local_size); }

 private:
  MultiCropOptions options_;
  int64_t global_kernel_ = 0, local_kernel_ = 0;
  Transform global1_, global2_, local_;
};

struct MultiCropBatch {
  Tensor global_crops;  // (2·B, C, global_size, global_size), view-major
  Tensor local_crops;   // (M·B, C, local_size, local_size), view-major; undefined when M = 0
  std::vector<int64_t> labels;  // B labels (as given)
  int64_t batch_size = 0, n_global = 0, n_local = 0;
};

// Stacks the views of B samples by resolution group, view-major. Every sample must have the
// same numbers of views, and the views of a group the same shape. `labels` is empty or B long.
// The DINO augmentation as a multi-view transform for MultiViewLoader: the 2 global crops
// then the M local crops. With collate_views_by_resolution the loader yields
// views = {global (2·B, C, g, g), local (M·B, C, l, l)}, the layout stack_multicrop makes.
MultiViewTransform dino_multiview_transform(const MultiCropOptions& options);

MultiCropBatch stack_multicrop(const std::vector<MultiCropViews>& samples, const std::vector<int64_t>& labels = {});

}  // namespace sima
