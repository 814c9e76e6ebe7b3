// The image transforms between a dataset and a model: what training augments with, and
// what evaluation (sima-eval, heatmaps) feeds the model, both from configs.
//
// Evaluation (timm's eval transform): resize the shorter side to img_size / crop_pct
// (bicubic, as timm), centre crop img_size, match the model's channel count (grey → RGB by
// repetition, RGB → grey by luma), normalise with the checkpoint's mean/std.
// Images already img_size × img_size skip the resize and the crop.
//
// Training (timm's create_transform order): [random_resized_crop | random_crop with padding],
// horizontal flip, [RandAugment | colour jitter], channel match, normalise, random erasing.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "data/dataset.h"
#include "models/config.h"

namespace sima {

struct AugmentOptions {
  // Geometry: "random_resized_crop" (scale, ratio below), "random_crop" (padding), or "none".
  std::string crop = "random_crop";
  std::pair<double, double> scale{0.08, 1.0};
  std::pair<double, double> ratio{3.0 / 4.0, 4.0 / 3.0};
  int64_t padding = 0;       // random_crop: pixels of zero padding on each side
  double hflip = 0.5;        // probability
  std::string rand_augment;  // timm config string ("rand-m9-mstd0.5-inc1"), "" = off
  double color_jitter = 0.0; // brightness/contrast/saturation strength (when no RandAugment)
  double random_erasing = 0.0;  // probability (timm 'pixel' mode)
  double crop_pct = 0.875;   // evaluation: resize to img_size / crop_pct, then centre crop
                             // (1.0 for small images: resize straight to img_size)
};

// Throws sima::Error naming the field ("augment.<field>") when an option is out of range.
void validate_augment(const AugmentOptions& a);
Transform train_transform(const ModelConfig& model, const AugmentOptions& augment);
Transform eval_transform(const ModelConfig& model, double crop_pct = 0.875);
// timm's default for a model input size: 0.875 from 100 pixels up, 1.0 below (small images
// such as Fashion-MNIST or CIFAR are evaluated whole, as their training code does).
double default_crop_pct(int64_t img_size);

}  // namespace sima
