// The image transforms between a dataset and a model: what training augments with, and
// what evaluation (sima-eval, heatmaps) feeds the model, both from configs.
//
// Evaluation (timm's eval transform): resize the shorter side to floor(img_size / crop_pct)
// (bicubic, as timm), centre crop img_size, match the model's channel count (grey → RGB by
// repetition, RGB → grey by luma), normalise with the checkpoint's mean/std. How it resizes is
// EvalResize below: 8-bit images go through Pillow's antialiased resize exactly as timm's
// torchvision transforms on a PIL image (data/pil_resize.h).
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

// How eval_transform resizes and crops (sima-eval --resize auto|pil|float):
//   Pil    as timm on a PIL image: quantise to 8 bits (exact for 8-bit sources), torchvision
//          Resize(floor(img_size / crop_pct), BICUBIC) = Pillow's antialiased bicubic on uint8
//          (skipped only when the size would not change), CenterCrop(img_size), then v / 255.
//          Images that are not 8-bit (pil::is_8bit) or not 1/3 channels are an error.
//   Float  the float path (data/functional.h resize_shorter: F.interpolate bicubic, a = −0.75,
//          no antialiasing, no 8-bit rounding); images already img_size × img_size pass through.
//   Auto   (default) Pil for 8-bit 1- and 3-channel images (decoded JPEG/PNG/BMP, IDX, CIFAR),
//          Float for the rest (16-bit PNGs, images already transformed in float); an image
//          already img_size × img_size passes through untouched for any crop_pct (a deliberate
//          difference from timm, which would resize it by 1/crop_pct and crop it back).
enum class EvalResize { Auto, Pil, Float };
EvalResize parse_eval_resize(const std::string& name);  // "auto" | "pil" | "float", else sima::Error
const char* eval_resize_name(EvalResize resize);
// Whether eval_transform(..., resize) takes the Pil path for this image at input size `size`
// (geometry: heatmaps).
bool eval_uses_pil(const Image& img, EvalResize resize, int64_t size);
Transform eval_transform(const ModelConfig& model, double crop_pct = 0.875, EvalResize resize = EvalResize::Auto);
// timm's default for a model input size: 0.875 from 100 pixels up, 1.0 below (small images
// such as Fashion-MNIST or CIFAR are evaluated whole, as their training code does).
double default_crop_pct(int64_t img_size);

}  // namespace sima
