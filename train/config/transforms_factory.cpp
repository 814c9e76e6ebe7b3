// The train and eval transforms of a model (see transforms_factory.h), composed from data/transforms.h
// and data/rand_augment.h.
#include "train/config/transforms_factory.h"

#include <cmath>

#include "core/error.h"
#include "data/pil_resize.h"
#include "data/rand_augment.h"
#include "data/transforms.h"

namespace sima {

namespace T = sima::transforms;
namespace F = sima::transforms::functional;

namespace {

// The model's channel count from the image's: grey -> RGB by repetition, RGB -> grey by luma
// (0.299 R + 0.587 G + 0.114 B, as PIL's convert("L") and torchvision's Grayscale).
Transform match_channels(int64_t in_chans) {
  check(in_chans == 1 || in_chans == 3, "transforms: the model's in_chans must be 1 or 3, got ", in_chans);
  return [in_chans](Image img, Generator&) {
    if (img.channels == in_chans) return img;
    check(img.channels == 1 || img.channels == 3, "transforms: cannot convert a ", img.channels,
          "-channel image to the model's ", in_chans, " channels");
    return in_chans == 3 ? F::to_three_channels(std::move(img)) : F::rgb_to_grayscale(img, 1);
  };
}

// Resize the shorter side to `size` (bicubic) unless the image is already size × size.
Transform resize_unless_square(int64_t size, int64_t resize_to) {
  return [size, resize_to](Image img, Generator&) {
    if (img.height == size && img.width == size) return img;
    return F::resize_shorter(img, resize_to, T::Interpolation::Bicubic);
  };
}

bool is_probability(double p) { return p >= 0.0 && p <= 1.0; }

}  // namespace

double default_crop_pct(int64_t img_size) { return img_size >= 100 ? 0.875 : 1.0; }

void validate_augment(const AugmentOptions& a) {
  check(a.crop == "random_resized_crop" || a.crop == "random_crop" || a.crop == "none", "augment.crop: '", a.crop,
        "' is not one of: random_resized_crop, random_crop, none");
  check(std::isfinite(a.scale.first) && std::isfinite(a.scale.second) && a.scale.first > 0.0 &&
            a.scale.first <= a.scale.second && a.scale.second <= 1.0,
        "augment.scale: (", a.scale.first, ", ", a.scale.second, ") must satisfy 0 < min <= max <= 1");
  check(std::isfinite(a.ratio.first) && std::isfinite(a.ratio.second) && a.ratio.first > 0.0 &&
            a.ratio.first <= a.ratio.second,
        "augment.ratio: (", a.ratio.first, ", ", a.ratio.second, ") must satisfy 0 < min <= max");
  check(a.padding >= 0 && a.padding <= F::kMaxImageSide, "augment.padding: ", a.padding, " is not in [0, ",
        F::kMaxImageSide, "]");
  check(is_probability(a.hflip), "augment.hflip: ", a.hflip, " is not a probability in [0, 1]");
  if (!a.rand_augment.empty()) {
    try {
      parse_rand_augment(a.rand_augment);
    } catch (const Error& e) {
      fail("augment.rand_augment: ", e.what());
    }
  }
  check(std::isfinite(a.color_jitter) && a.color_jitter >= 0.0, "augment.color_jitter: ", a.color_jitter,
        " must be a non-negative number");
  check(is_probability(a.random_erasing), "augment.random_erasing: ", a.random_erasing,
        " is not a probability in [0, 1]");
  check(std::isfinite(a.crop_pct) && a.crop_pct > 0.0 && a.crop_pct <= 1.0, "augment.crop_pct: ", a.crop_pct,
        " is not in (0, 1]");
}

// timm's create_transform(is_training=True) order:
//   crop -> hflip -> [RandAugment | colour jitter] -> channels -> normalise -> random erasing.
// The crop ends at img_size × img_size:
//   random_resized_crop  RandomResizedCrop(img_size, scale, ratio, bicubic)
//   random_crop          images not img_size × img_size first get their shorter side resized to
//                        img_size (bicubic) and centre-cropped; then pad and RandomCrop(img_size)
//   none                 the same resize and centre crop, nothing random
Transform train_transform(const ModelConfig& model, const AugmentOptions& augment) {
  validate_augment(augment);
  const int64_t size = model.img_size;
  std::vector<Transform> ts;
  if (augment.crop == "random_resized_crop") {
    ts.push_back(T::random_resized_crop(size, {.scale = augment.scale, .ratio = augment.ratio,
                                               .interpolation = T::Interpolation::Bicubic}));
  } else {
    ts.push_back(resize_unless_square(size, size));
    ts.push_back(T::center_crop(size));
    if (augment.crop == "random_crop") ts.push_back(T::random_crop(size, augment.padding));
  }
  if (augment.hflip > 0.0) ts.push_back(T::horizontal_flip(augment.hflip));
  if (!augment.rand_augment.empty()) {
    // timm: fill = round(255 · mean) and the configured (bicubic) interpolation, as DeiT.
    std::vector<float> mean = model.mean;
    if (mean.size() == 1) mean.assign(3, mean[0]);  // a grey model may still see RGB data here
    RandAugmentOptions ra{.fill = fill_from_mean(mean), .random_interpolation = false,
                          .interpolation = pil::Resample::Bicubic};
    ts.push_back(RandAugment(augment.rand_augment, ra).transform());
  } else if (augment.color_jitter > 0.0) {
    const float v = static_cast<float>(augment.color_jitter);
    ts.push_back(T::color_jitter(v, v, v));  // timm: a float → (v, v, v), no hue
  }
  ts.push_back(match_channels(model.in_chans));
  ts.push_back(T::normalize(model.mean, model.std));
  if (augment.random_erasing > 0.0)
    ts.push_back(T::random_erasing({.probability = augment.random_erasing, .mode = T::EraseMode::Pixel}));
  return T::compose(std::move(ts));
}

EvalResize parse_eval_resize(const std::string& name) {
  if (name == "auto") return EvalResize::Auto;
  if (name == "pil") return EvalResize::Pil;
  if (name == "float") return EvalResize::Float;
  fail("eval resize: '", name, "' is not one of: auto, pil, float");
}

const char* eval_resize_name(EvalResize resize) {
  return resize == EvalResize::Pil ? "pil" : resize == EvalResize::Float ? "float" : "auto";
}

bool eval_uses_pil(const Image& img, EvalResize resize, int64_t size) {
  if (resize == EvalResize::Float) return false;
  const bool l_or_rgb = img.channels == 1 || img.channels == 3;
  if (resize == EvalResize::Pil) {
    check(l_or_rgb, "eval_transform (resize pil): a ", img.channels,
          "-channel image; the PIL path takes 1 (L) or 3 (RGB) channels");
    check(pil::is_8bit(img), "eval_transform (resize pil): the image is not 8-bit (values not all k/255, e.g. a "
          "16-bit PNG); --resize float (or auto) resizes it in float");
    return true;
  }
  // Auto: an image already size × size passes through untouched, as on the float path (timm
  // would resize it by 1/crop_pct and crop it back: a 28-pixel Fashion-MNIST digit would lose
  // its border at the default crop_pct 0.875).
  if (img.height == size && img.width == size) return false;
  return l_or_rgb && pil::is_8bit(img);
}

// timm's transforms_imagenet_eval: Resize(floor(img_size / crop_pct), bicubic),
// CenterCrop(img_size), then channels and Normalize. The resize and crop per image as
// EvalResize says (transforms_factory.h).
Transform eval_transform(const ModelConfig& model, double crop_pct, EvalResize resize) {
  check(std::isfinite(crop_pct) && crop_pct > 0.0 && crop_pct <= 1.0, "eval_transform: crop_pct ", crop_pct,
        " is not in (0, 1]");
  const int64_t size = model.img_size;
  const int64_t scale_size = static_cast<int64_t>(std::floor(static_cast<double>(size) / crop_pct));
  std::vector<Transform> ts;
  const Transform float_resize = resize_unless_square(size, scale_size);
  ts.push_back([size, scale_size, resize, float_resize](Image img, Generator& g) {
    if (eval_uses_pil(img, resize, size)) {
      pil::Image8 u = pil::resize_shorter(pil::to_uint8(img), scale_size, pil::Resample::Bicubic);
      return pil::from_uint8(pil::center_crop(u, size, size));  // ToTensor: v / 255 in float
    }
    if (img.height == size && img.width == size) return img;
    return F::center_crop(float_resize(std::move(img), g), size, size);
  });
  ts.push_back(match_channels(model.in_chans));
  ts.push_back(T::normalize(model.mean, model.std));
  return T::compose(std::move(ts));
}

}  // namespace sima
