// The Transform factories of data/transforms.h: option checks, the parameter draws of
// torchvision's (and timm's) random transforms, then the ops of data/functional.h.
#include "data/transforms.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"

namespace sima::transforms {

namespace F = functional;

namespace {

void check_probability(double p, const char* op) {
  check(p >= 0.0 && p <= 1.0, op, ": probability ", p, " is not in [0, 1]");
}
void check_size(int64_t h, int64_t w, const char* op) {
  F::check_output_size(h, w, op);
}
void check_range(std::pair<double, double> r, double low, const char* op, const char* what) {
  check(std::isfinite(r.first) && std::isfinite(r.second) && r.first <= r.second && r.first >= low, op, ": ",
        what, " (", r.first, ", ", r.second, ") must be an ordered pair of numbers >= ", low);
}
// U[a, b) from the generator (torch.empty(1).uniform_(a, b) / random.uniform).
double uniform(Generator& gen, double a, double b) { return a + (b - a) * gen.uniform_double(); }

}  // namespace

Transform compose(std::vector<Transform> transforms) {
  for (size_t i = 0; i < transforms.size(); ++i)
    check(static_cast<bool>(transforms[i]), "compose: transform ", i, " is empty");
  return [ts = std::move(transforms)](Image img, Generator& gen) {
    for (const Transform& t : ts) img = t(std::move(img), gen);
    return img;
  };
}

Transform random_apply(Transform t, double p) {
  check(static_cast<bool>(t), "random_apply: empty transform");
  check_probability(p, "random_apply");
  return [t = std::move(t), p](Image img, Generator& gen) {
    if (p < gen.uniform()) return img;
    return t(std::move(img), gen);
  };
}

// ---- geometry ---------------------------------------------------------------

Transform resize(int64_t size, Interpolation mode) {
  F::check_output_size(size, size, "resize");
  return [=](Image img, Generator&) { return F::resize_shorter(img, size, mode); };
}

Transform resize(int64_t height, int64_t width, Interpolation mode) {
  check_size(height, width, "resize");
  return [=](Image img, Generator&) {
    if (img.height == height && img.width == width) return img;
    return F::resize(img, height, width, mode);
  };
}

Transform center_crop(int64_t size) { return center_crop(size, size); }
Transform center_crop(int64_t height, int64_t width) {
  check_size(height, width, "center_crop");
  return [=](Image img, Generator&) { return F::center_crop(img, height, width); };
}

Transform random_crop(int64_t size, int64_t padding, float fill) {
  const int64_t height = size, width = size;
  check_size(height, width, "random_crop");
  check(padding >= 0 && padding <= F::kMaxImageSide, "random_crop: padding ", padding, " is not in 0..",
        F::kMaxImageSide);
  return [=](Image img, Generator& gen) {
    if (padding > 0) img = F::pad(img, padding, padding, padding, padding, fill);
    F::check_image(img, "random_crop");
    check(img.height >= height && img.width >= width, "random_crop: crop size (", height, ", ", width,
          ") is larger than the (padded) image (", img.height, ", ", img.width, ")");
    if (img.height == height && img.width == width) return img;
    const int64_t top = static_cast<int64_t>(gen.randint(img.height - height + 1));
    const int64_t left = static_cast<int64_t>(gen.randint(img.width - width + 1));
    return F::crop(img, top, left, height, width);
  };
}

CropBox random_resized_crop_params(int64_t height, int64_t width, std::pair<double, double> scale,
                                   std::pair<double, double> ratio, Generator& gen) {
  check(height > 0 && width > 0, "random_resized_crop: image size (", height, ", ", width, ") must be positive");
  const double area = static_cast<double>(height) * static_cast<double>(width);
  const double log_r0 = std::log(ratio.first), log_r1 = std::log(ratio.second);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * uniform(gen, scale.first, scale.second);
    const double aspect = std::exp(uniform(gen, log_r0, log_r1));
    // Python's int(round(x)): half to even
    const int64_t w = static_cast<int64_t>(std::nearbyint(std::sqrt(target_area * aspect)));
    const int64_t h = static_cast<int64_t>(std::nearbyint(std::sqrt(target_area / aspect)));
    if (0 < w && w <= width && 0 < h && h <= height) {
      const int64_t top = static_cast<int64_t>(gen.randint(height - h + 1));
      const int64_t left = static_cast<int64_t>(gen.randint(width - w + 1));
      return {top, left, h, w};
    }
  }
  // Fallback: a centre crop with the ratio clamped into [ratio.first, ratio.second].
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  int64_t w = width, h = height;
  if (in_ratio < ratio.first) h = static_cast<int64_t>(std::nearbyint(w / ratio.first));
  else if (in_ratio > ratio.second) w = static_cast<int64_t>(std::nearbyint(h * ratio.second));
  return {(height - h) / 2, (width - w) / 2, h, w};
}

Transform random_resized_crop(int64_t size, const RandomResizedCropOptions& options) {
  return random_resized_crop(size, size, options);
}
Transform random_resized_crop(int64_t height, int64_t width, const RandomResizedCropOptions& o) {
  const char* op = "random_resized_crop";
  check_size(height, width, op);
  check_range(o.scale, 0.0, op, "scale");
  check(o.scale.second > 0.0, op, ": scale (", o.scale.first, ", ", o.scale.second, ") must allow a crop");
  check_range(o.ratio, 0.0, op, "ratio");
  check(o.ratio.first > 0.0, op, ": ratio (", o.ratio.first, ", ", o.ratio.second, ") must be positive");
  return [=](Image img, Generator& gen) {
    F::check_image(img, "random_resized_crop");
    const CropBox b = random_resized_crop_params(img.height, img.width, o.scale, o.ratio, gen);
    return F::resized_crop(img, b.top, b.left, b.height, b.width, height, width, o.interpolation);
  };
}

Transform horizontal_flip(double p) {
  check_probability(p, "horizontal_flip");
  return [=](Image img, Generator& gen) {
    if (gen.uniform() < p) return F::hflip(std::move(img));
    return img;
  };
}

// ---- colour -----------------------------------------------------------------

Transform color_jitter(float brightness, float contrast, float saturation, float hue) {
  auto check_strength = [](float v, const char* what) {
    check(std::isfinite(v) && v >= 0.f, "color_jitter: ", what, " ", v, " must be non-negative");
  };
  check_strength(brightness, "brightness");
  check_strength(contrast, "contrast");
  check_strength(saturation, "saturation");
  check_strength(hue, "hue");
  check(hue <= 0.5f, "color_jitter: hue ", hue, " must be at most 0.5");
  return [=](Image img, Generator& gen) {
    // torch.randperm(4), as a Fisher–Yates shuffle
    int order[4] = {0, 1, 2, 3};
    for (int i = 3; i > 0; --i) std::swap(order[i], order[gen.randint(i + 1)]);
    // factors drawn in torchvision's order: brightness, contrast, saturation, hue
    auto factor = [&](float v) { return static_cast<float>(uniform(gen, std::max(0.f, 1.f - v), 1.f + v)); };
    const float fb = brightness > 0.f ? factor(brightness) : 1.f;
    const float fc = contrast > 0.f ? factor(contrast) : 1.f;
    const float fs = saturation > 0.f ? factor(saturation) : 1.f;
    const float fh = hue > 0.f ? static_cast<float>(uniform(gen, -hue, hue)) : 0.f;
    for (int fn : order) {
      if (fn == 0 && brightness > 0.f) img = F::adjust_brightness(std::move(img), fb);
      else if (fn == 1 && contrast > 0.f) img = F::adjust_contrast(std::move(img), fc);
      else if (fn == 2 && saturation > 0.f) img = F::adjust_saturation(std::move(img), fs);
      else if (fn == 3 && hue > 0.f) img = F::adjust_hue(std::move(img), fh);
    }
    return img;
  };
}

Transform grayscale(int64_t num_output_channels) {
  check(num_output_channels == 1 || num_output_channels == 3, "grayscale: num_output_channels must be 1 or 3, got ",
        num_output_channels);
  return [=](Image img, Generator&) { return F::rgb_to_grayscale(img, num_output_channels); };
}

Transform random_grayscale(double p) {
  check_probability(p, "random_grayscale");
  return [=](Image img, Generator& gen) {
    if (gen.uniform() < p) return F::rgb_to_grayscale(img, img.channels);
    return img;
  };
}

Transform gaussian_blur(int64_t kernel_size, float sigma_min, float sigma_max) {
  check(kernel_size > 0 && kernel_size % 2 == 1, "gaussian_blur: kernel_size ", kernel_size,
        " must be odd and positive");
  check(sigma_min > 0.f && sigma_min <= sigma_max && std::isfinite(sigma_max), "gaussian_blur: sigma (", sigma_min,
        ", ", sigma_max, ") must be an ordered pair of positive numbers");
  return [=](Image img, Generator& gen) {
    const float sigma = static_cast<float>(uniform(gen, sigma_min, sigma_max));
    return F::gaussian_blur(img, kernel_size, sigma);
  };
}

Transform solarize(float threshold, double p) {
  check(std::isfinite(threshold), "solarize: threshold ", threshold, " is not a number");
  check_probability(p, "solarize");
  return [=](Image img, Generator& gen) {
    if (gen.uniform() < p) return F::solarize(std::move(img), threshold);
    return img;
  };
}

Transform normalize(std::vector<float> mean, std::vector<float> std) {
  check(!mean.empty() && !std.empty(), "normalize: mean and std must not be empty");
  for (float s : std) check(s != 0.f && std::isfinite(s), "normalize: std ", s, " must be non-zero and finite");
  return [mean = std::move(mean), std = std::move(std)](Image img, Generator&) {
    return F::normalize(std::move(img), mean, std);
  };
}

Transform to_three_channels() {
  return [](Image img, Generator&) { return F::to_three_channels(std::move(img)); };
}

// ---- timm RandomErasing -----------------------------------------------------

Transform random_erasing(const RandomErasingOptions& o) {
  const char* op = "random_erasing";
  check_probability(o.probability, op);
  check_range(o.scale, 0.0, op, "scale");
  check_range(o.ratio, 0.0, op, "ratio");
  check(o.ratio.first > 0.0, op, ": ratio (", o.ratio.first, ", ", o.ratio.second, ") must be positive");
  check(o.min_count >= 1 && o.min_count <= o.max_count, op, ": count range (", o.min_count, ", ", o.max_count,
        ") must satisfy 1 <= min <= max");
  return [=](Image img, Generator& gen) {
    F::check_image(img, "random_erasing");
    if (gen.uniform_double() > o.probability) return img;  // timm: random.random() > p skips
    const int64_t H = img.height, W = img.width, C = img.channels;
    const double area = static_cast<double>(H) * static_cast<double>(W);
    // random.randint(min_count, max_count), both ends included
    const int64_t count = o.min_count == o.max_count
                              ? o.min_count
                              : o.min_count + static_cast<int64_t>(gen.randint(o.max_count - o.min_count + 1));
    const double log_r0 = std::log(o.ratio.first), log_r1 = std::log(o.ratio.second);
    for (int64_t n = 0; n < count; ++n) {
      for (int attempt = 0; attempt < 10; ++attempt) {
        const double target_area = uniform(gen, o.scale.first, o.scale.second) * area / count;
        const double aspect = std::exp(uniform(gen, log_r0, log_r1));
        const int64_t h = static_cast<int64_t>(std::nearbyint(std::sqrt(target_area * aspect)));
        const int64_t w = static_cast<int64_t>(std::nearbyint(std::sqrt(target_area / aspect)));
        if (!(w < W && h < H)) continue;
        const int64_t top = static_cast<int64_t>(gen.randint(H - h + 1));  // random.randint(0, H − h)
        const int64_t left = static_cast<int64_t>(gen.randint(W - w + 1));
        for (int64_t c = 0; c < C; ++c) {
          const float channel_value = o.mode == EraseMode::Rand ? gen.normal() : 0.f;
          for (int64_t y = top; y < top + h; ++y)
            for (int64_t x = left; x < left + w; ++x)
              img.at(c, y, x) = o.mode == EraseMode::Pixel ? gen.normal() : channel_value;
        }
        break;
      }
    }
    return img;
  };
}

}  // namespace sima::transforms
