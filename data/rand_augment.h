// timm's RandAugment, configured by the same string ("rand-m9-mstd0.5-inc1", DeiT's recipe).
//
// Per image: n ops are chosen uniformly with replacement from the op set; each is applied
// with probability 0.5, at a magnitude ~ N(m, mstd²) (uniform in [0, m] when mstd > 100)
// clipped to [0, mmax] (mmax = 10 unless given), mapped to the op's argument by timm's
// level functions (level = magnitude / 10):
//   Rotate ±30·level degrees             ShearX/ShearY ±0.3·level
//   TranslateXRel/YRel ±0.45·level of the width / height
//   Posterize int(4·level) bits          PosterizeIncreasing 4 − int(4·level) bits
//   Solarize threshold int(256·level)    SolarizeIncreasing 256 − int(256·level)
//   SolarizeAdd +int(110·level) below 128
//   Color/Contrast/Brightness/Sharpness factor 0.1 + 1.8·level
//   ...Increasing factor max(0.1, 1 ± 0.9·level)
//   AutoContrast, Equalize, Invert: no argument
// "±" is a random sign (negated when u > 0.5). The ops run on the image quantised to
// 0..255, as Pillow computes them (data/pil_ops.h); the result is converted back to [0, 1].
//
// Config sections after "rand", separated by '-', in any order:
//   m<int>     magnitude, 0..mmax (default 10)     n<int>     ops per image (default 2)
//   mstd<num>  magnitude noise std (default 0)     mmax<int>  magnitude upper bound (default 10)
//   inc<0|1>   the 'increasing' op set (default 0)
// timm's 'w' (weighted op choice) is not supported and is an error, as is anything else.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/rng.h"
#include "data/dataset.h"
#include "data/pil_ops.h"

namespace sima {

struct RandAugmentConfig {
  int magnitude = 10;
  int num_layers = 2;
  double magnitude_std = 0.0;  // infinity: uniform in [0, magnitude]
  int magnitude_max = 10;
  bool increasing = false;
};
// Parses a timm RandAugment string; throws sima::Error naming the section at fault.
RandAugmentConfig parse_rand_augment(const std::string& config);

enum class RandAugmentOp {
  AutoContrast, Equalize, Invert, Rotate, Posterize, PosterizeIncreasing, Solarize, SolarizeIncreasing,
  SolarizeAdd, Color, ColorIncreasing, Contrast, ContrastIncreasing, Brightness, BrightnessIncreasing,
  Sharpness, SharpnessIncreasing, ShearX, ShearY, TranslateXRel, TranslateYRel,
};
const char* rand_augment_op_name(RandAugmentOp op);
// timm's _RAND_TRANSFORMS, or _RAND_INCREASING_TRANSFORMS when increasing (15 ops each).
std::vector<RandAugmentOp> rand_augment_ops(bool increasing);

struct RandAugmentOptions {
  // Fill of the area geometric ops uncover, 0..255 per channel. timm's create_transform
  // passes round(255·mean) of the normalisation mean (see fill_from_mean); its AugmentOp
  // default, used here, is 128 grey.
  std::vector<uint8_t> fill = {128, 128, 128};
  // Resampling of the geometric ops: timm picks bilinear or bicubic at random per op unless
  // an interpolation is configured (DeiT configures bicubic).
  bool random_interpolation = true;
  pil::Resample interpolation = pil::Resample::Bicubic;
  double prob = 0.5;           // of each chosen op being applied
  double translate_pct = 0.45;  // TranslateXRel/YRel at magnitude 10
};
// timm: tuple(min(255, round(255·m)) for m in mean), e.g. ImageNet -> (124, 116, 104).
std::vector<uint8_t> fill_from_mean(const std::vector<float>& mean);

class RandAugment {
 public:
  explicit RandAugment(const RandAugmentConfig& config, const RandAugmentOptions& options = {});
  explicit RandAugment(const std::string& config, const RandAugmentOptions& options = {})
      : RandAugment(parse_rand_augment(config), options) {}

  Image operator()(Image img, Generator& gen) const;
  // The image with op applied at `magnitude` (0..10, no noise, no probability), the sign of the
  // signed ops fixed by `negate`: what one applied op does, for tests and visualisation.
  pil::Image8 apply(RandAugmentOp op, const pil::Image8& img, double magnitude, bool negate,
                    pil::Resample resample) const;

  const RandAugmentConfig& config() const { return config_; }
  const std::vector<RandAugmentOp>& ops() const { return ops_; }
  Transform transform() const;

 private:
  RandAugmentConfig config_;
  RandAugmentOptions options_;
  std::vector<RandAugmentOp> ops_;
};

}  // namespace sima
