// DINO's multi-crop views and their batching (see multicrop.h).
#include "data/multicrop.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace sima {

int64_t scaled_blur_kernel(int64_t crop_size) {
  check(crop_size > 0, "multicrop: crop size ", crop_size, " must be positive");
  // the odd number nearest 23·size/224: 2·round((23·size/224 − 1)/2) + 1
  const double k = 23.0 * static_cast<double>(crop_size) / 224.0;
  int64_t odd = 2 * static_cast<int64_t>(std::nearbyint((k - 1.0) / 2.0)) + 1;
  odd = std::max<int64_t>(odd, 3);
  return std::min<int64_t>(odd, 2 * crop_size - 1);  // reflect padding k/2 must stay below the size
}

std::pair<float, float> scaled_blur_sigma(const MultiCropOptions& o, int64_t crop_size) {
  check(o.blur_sigma_reference >= 0 && o.blur_sigma_reference <= 4096, "multicrop: blur_sigma_reference ",
        o.blur_sigma_reference, " is not in 0..4096 (0 = sigma in pixels)");
  if (o.blur_sigma_reference == 0) return o.blur_sigma;
  const float f = float(double(crop_size) / double(o.blur_sigma_reference));
  return {o.blur_sigma.first * f, o.blur_sigma.second * f};
}

DataAugmentationDINO::DataAugmentationDINO(const MultiCropOptions& o) : options_(o) {
  using namespace transforms;
  check(o.global_size > 0 && o.local_size > 0 && o.global_size <= 4096 && o.local_size <= 4096,
        "multicrop: crop sizes (global ", o.global_size, ", local ", o.local_size, ") must be in 1..4096");
  check(o.local_crops >= 0 && o.local_crops <= 256, "multicrop: local_crops ", o.local_crops, " is not in 0..256");
  for (double p : {o.global1_blur_p, o.global2_blur_p, o.local_blur_p, o.solarize_p})
    check(p >= 0.0 && p <= 1.0, "multicrop: probability ", p, " is not in [0, 1]");
  auto kernel = [](int64_t given, int64_t size, const char* which) {
    if (given == 0) return scaled_blur_kernel(size);
    check(given > 0 && given % 2 == 1 && given / 2 < size, "multicrop: ", which, "_blur_kernel ", given,
          " must be odd, positive and below twice the crop size ", size);
    return given;
  };
  global_kernel_ = kernel(o.global_blur_kernel, o.global_size, "global");
  local_kernel_ = kernel(o.local_blur_kernel, o.local_size, "local");

  auto flip_and_color_jitter = [&] {
    return compose({horizontal_flip(o.flip_p),
                    random_apply(color_jitter(o.brightness, o.contrast, o.saturation, o.hue), o.color_jitter_p),
                    random_grayscale(o.grayscale_p)});
  };
  auto blur = [&](int64_t k, int64_t size, double p) {
    const std::pair<float, float> sigma = scaled_blur_sigma(o, size);
    return random_apply(gaussian_blur(k, sigma.first, sigma.second), p);
  };
  // the steps before and after the view-specific ones
  auto build = [&](int64_t size, std::pair<double, double> scale, std::vector<Transform> middle) {
    std::vector<Transform> ts;
    if (o.to_three_channels) ts.push_back(transforms::to_three_channels());
    ts.push_back(random_resized_crop(size, {.scale = scale, .ratio = {3.0 / 4.0, 4.0 / 3.0},
                                            .interpolation = o.interpolation}));
    ts.push_back(flip_and_color_jitter());
    for (Transform& t : middle) ts.push_back(std::move(t));
    if (!o.mean.empty() || !o.std.empty()) ts.push_back(transforms::normalize(o.mean, o.std));
    return compose(std::move(ts));
  };
  global1_ = build(o.global_size, o.global_scale, {blur(global_kernel_, o.global_size, o.global1_blur_p)});
  global2_ = build(o.global_size, o.global_scale,
                   {blur(global_kernel_, o.global_size, o.global2_blur_p),
                    transforms::solarize(o.solarize_threshold, o.solarize_p)});
  local_ = build(o.local_size, o.local_scale, {blur(local_kernel_, o.local_size, o.local_blur_p)});
}

MultiCropViews DataAugmentationDINO::operator()(const Image& image, Generator& gen) const {
  MultiCropViews v;
  v.global_crops.push_back(global1_(image, gen));
  v.global_crops.push_back(global2_(image, gen));
  for (int64_t i = 0; i < options_.local_crops; ++i) v.local_crops.push_back(local_(image, gen));
  return v;
}

namespace {

// (n_views·B, C, h, w) with row v·B + b = views(b)[v].
Tensor stack_group(const std::vector<MultiCropViews>& samples, bool global, const char* group) {
  const int64_t B = static_cast<int64_t>(samples.size());
  auto views = [&](int64_t b) -> const std::vector<Image>& {
    return global ? samples[b].global_crops : samples[b].local_crops;
  };
  const int64_t n = static_cast<int64_t>(views(0).size());
  if (n == 0) return Tensor();
  const Image& first = views(0)[0];
  const int64_t C = first.channels, H = first.height, W = first.width, per = C * H * W;
  Tensor t = empty(Shape{n * B, C, H, W});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t v = 0; v < n; ++v) {
      const Image& img = views(b)[v];
      check(img.channels == C && img.height == H && img.width == W &&
                static_cast<int64_t>(img.data.size()) == per,
            "stack_multicrop: ", group, " view ", v, " of sample ", b, " is (", img.channels, ", ", img.height, ", ",
            img.width, "), expected (", C, ", ", H, ", ", W, ") as the first");
      std::memcpy(t.data() + (v * B + b) * per, img.data.data(), sizeof(float) * per);
    }
  return t;
}

}  // namespace

MultiCropBatch stack_multicrop(const std::vector<MultiCropViews>& samples, const std::vector<int64_t>& labels) {
  check(!samples.empty(), "stack_multicrop: no samples");
  const int64_t B = static_cast<int64_t>(samples.size());
  check(labels.empty() || static_cast<int64_t>(labels.size()) == B, "stack_multicrop: ", labels.size(),
        " labels for ", B, " samples");
  MultiCropBatch batch;
  batch.batch_size = B;
  batch.n_global = static_cast<int64_t>(samples[0].global_crops.size());
  batch.n_local = static_cast<int64_t>(samples[0].local_crops.size());
  check(batch.n_global > 0, "stack_multicrop: sample 0 has no global views");
  for (int64_t b = 0; b < B; ++b)
    check(static_cast<int64_t>(samples[b].global_crops.size()) == batch.n_global &&
              static_cast<int64_t>(samples[b].local_crops.size()) == batch.n_local,
          "stack_multicrop: sample ", b, " has ", samples[b].global_crops.size(), " global and ",
          samples[b].local_crops.size(), " local views, sample 0 has ", batch.n_global, " and ", batch.n_local);
  batch.global_crops = stack_group(samples, true, "global");
  batch.local_crops = stack_group(samples, false, "local");
  batch.labels = labels;
  return batch;
}

MultiViewTransform dino_multiview_transform(const MultiCropOptions& options) {
  auto aug = std::make_shared<DataAugmentationDINO>(options);
  return [aug](Image img, Generator& gen) {
    MultiCropViews v = (*aug)(img, gen);
    std::vector<Image> views = std::move(v.global_crops);
    for (Image& l : v.local_crops) views.push_back(std::move(l));
    return views;
  };
}

}  // namespace sima
