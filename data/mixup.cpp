// timm's Mixup / CutMix in mode 'batch' (see mixup.h for the formulas).
#include "data/mixup.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace sima {

namespace {

// Gamma(a, 1) by Marsaglia & Tsang (2000): for a >= 1, with d = a − 1/3, c = 1/√(9d),
// x ~ N(0, 1), v = (1 + c·x)³, accept d·v when log u < x²/2 + d·(1 − v + log v).
// For a < 1: Gamma(a) = Gamma(a + 1)·u^(1/a).
double sample_gamma(double a, Generator& gen) {
  if (a < 1.0) {
    const double u = 1.0 - gen.uniform_double();  // (0, 1]
    return sample_gamma(a + 1.0, gen) * std::pow(u, 1.0 / a);
  }
  const double d = a - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  while (true) {
    const double x = gen.normal();
    const double t = 1.0 + c * x;
    if (t <= 0.0) continue;
    const double v = t * t * t;
    const double u = 1.0 - gen.uniform_double();
    if (u < 1.0 - 0.0331 * x * x * x * x) return d * v;
    if (std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v;
  }
}

}  // namespace

double sample_beta(double a, double b, Generator& gen) {
  check(a > 0.0 && b > 0.0 && std::isfinite(a) && std::isfinite(b), "sample_beta: parameters (", a, ", ", b,
        ") must be positive");
  const double x = sample_gamma(a, gen), y = sample_gamma(b, gen);
  if (x + y == 0.0) return gen.uniform_double() < a / (a + b) ? 1.0 : 0.0;  // both underflowed (tiny a, b)
  return x / (x + y);
}

Tensor mixup_target(const std::vector<int64_t>& labels, int64_t num_classes, double lam, double smoothing) {
  check(num_classes > 0, "mixup_target: num_classes ", num_classes, " must be positive");
  check(smoothing >= 0.0 && smoothing < 1.0, "mixup_target: label_smoothing ", smoothing, " is not in [0, 1)");
  const int64_t B = static_cast<int64_t>(labels.size());
  for (int64_t i = 0; i < B; ++i)
    check(labels[i] >= 0 && labels[i] < num_classes, "mixup_target: label ", labels[i], " of sample ", i,
          " is not in [0, ", num_classes, ")");
  // off = ε/C, on = 1 − ε + ε/C
  const double off = smoothing / static_cast<double>(num_classes), on = 1.0 - smoothing + off;
  Tensor t = empty(Shape{B, num_classes});
  float* p = t.data();
  for (int64_t i = 0; i < B; ++i) {
    float* row = p + i * num_classes;
    const int64_t y1 = labels[i], y2 = labels[B - 1 - i];
    for (int64_t k = 0; k < num_classes; ++k) {
      const double a = k == y1 ? on : off, b = k == y2 ? on : off;
      row[k] = static_cast<float>(a * lam + b * (1.0 - lam));
    }
  }
  return t;
}

CutmixBox rand_bbox(int64_t height, int64_t width, double lam, Generator& gen) {
  check(height > 0 && width > 0, "rand_bbox: image size (", height, ", ", width, ") must be positive");
  check(lam >= 0.0 && lam <= 1.0, "rand_bbox: lam ", lam, " is not in [0, 1]");
  const double ratio = std::sqrt(1.0 - lam);
  const int64_t cut_h = static_cast<int64_t>(height * ratio), cut_w = static_cast<int64_t>(width * ratio);
  const int64_t cy = static_cast<int64_t>(gen.randint(height));
  const int64_t cx = static_cast<int64_t>(gen.randint(width));
  CutmixBox b;
  b.y0 = std::clamp<int64_t>(cy - cut_h / 2, 0, height);
  b.y1 = std::clamp<int64_t>(cy + cut_h / 2, 0, height);
  b.x0 = std::clamp<int64_t>(cx - cut_w / 2, 0, width);
  b.x1 = std::clamp<int64_t>(cx + cut_w / 2, 0, width);
  return b;
}

Mixup::Mixup(const MixupOptions& o) : options_(o) {
  auto finite_nonneg = [](double v) { return std::isfinite(v) && v >= 0.0; };
  check(finite_nonneg(o.mixup_alpha) && finite_nonneg(o.cutmix_alpha), "mixup: alphas (mixup ", o.mixup_alpha,
        ", cutmix ", o.cutmix_alpha, ") must be non-negative");
  check(o.prob >= 0.0 && o.prob <= 1.0, "mixup: prob ", o.prob, " is not in [0, 1]");
  check(o.switch_prob >= 0.0 && o.switch_prob <= 1.0, "mixup: switch_prob ", o.switch_prob, " is not in [0, 1]");
  check(o.label_smoothing >= 0.0 && o.label_smoothing < 1.0, "mixup: label_smoothing ", o.label_smoothing,
        " is not in [0, 1)");
  check(o.num_classes > 0, "mixup: num_classes ", o.num_classes, " must be positive");
}

MixupResult Mixup::operator()(const Tensor& images, const std::vector<int64_t>& labels, Generator& gen) const {
  const MixupOptions& o = options_;
  check(images.defined() && images.dim() == 4, "mixup: images must be a (B, C, H, W) tensor, got ",
        images.defined() ? images.shape().str() : std::string("undefined"));
  const int64_t B = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  check(B > 0 && B % 2 == 0, "mixup: batch size ", B, " must be even (sample i is mixed with sample B − 1 − i)");
  check(static_cast<int64_t>(labels.size()) == B, "mixup: ", labels.size(), " labels for a batch of ", B);
  for (int64_t i = 0; i < B; ++i)
    check(labels[i] >= 0 && labels[i] < o.num_classes, "mixup: label ", labels[i], " of sample ", i,
          " is not in [0, ", o.num_classes, ")");

  // timm's _params_per_batch
  MixupResult r;
  const bool mix_enabled = o.mixup_alpha > 0.0 || o.cutmix_alpha > 0.0;
  if (mix_enabled && gen.uniform_double() < o.prob) {
    if (o.mixup_alpha > 0.0 && o.cutmix_alpha > 0.0) {
      r.cutmix = gen.uniform_double() < o.switch_prob;
      const double alpha = r.cutmix ? o.cutmix_alpha : o.mixup_alpha;
      r.lam = sample_beta(alpha, alpha, gen);
    } else if (o.mixup_alpha > 0.0) {
      r.lam = sample_beta(o.mixup_alpha, o.mixup_alpha, gen);
    } else {
      r.cutmix = true;
      r.lam = sample_beta(o.cutmix_alpha, o.cutmix_alpha, gen);
    }
  }

  r.images = empty(images.shape());
  const float* x = images.data();
  float* out = r.images.data();
  const int64_t per_sample = C * H * W;
  std::memcpy(out, x, sizeof(float) * B * per_sample);
  if (r.lam != 1.0) {
    if (r.cutmix) {
      r.box = rand_bbox(H, W, r.lam, gen);
      if (o.correct_lam)
        r.lam = 1.0 - static_cast<double>((r.box.y1 - r.box.y0) * (r.box.x1 - r.box.x0)) / static_cast<double>(H * W);
      for (int64_t i = 0; i < B; ++i) {
        const float* src = x + (B - 1 - i) * per_sample;
        float* dst = out + i * per_sample;
        for (int64_t c = 0; c < C; ++c)
          for (int64_t y = r.box.y0; y < r.box.y1; ++y)
            for (int64_t xx = r.box.x0; xx < r.box.x1; ++xx) dst[(c * H + y) * W + xx] = src[(c * H + y) * W + xx];
      }
    } else {
      const float lam = static_cast<float>(r.lam), rest = static_cast<float>(1.0 - r.lam);
      for (int64_t i = 0; i < B; ++i) {
        const float* a = x + i * per_sample;
        const float* b = x + (B - 1 - i) * per_sample;
        float* dst = out + i * per_sample;
        for (int64_t k = 0; k < per_sample; ++k) dst[k] = lam * a[k] + rest * b[k];
      }
    }
  }
  r.targets = mixup_target(labels, o.num_classes, r.lam, o.label_smoothing);
  return r;
}

}  // namespace sima
