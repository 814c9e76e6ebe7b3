// Batch-level Mixup / CutMix with label smoothing, as timm's Mixup in mode 'batch'
// (the DeiT recipe: mixup_alpha 0.8, cutmix_alpha 1.0, prob 1, switch_prob 0.5,
// label_smoothing 0.1).
//
// Per batch: with probability `prob` mix, choosing CutMix with probability switch_prob
// when both alphas are > 0, and λ ~ Beta(α, α) of the chosen method. With x' = x.flip(0)
// (sample i is mixed with sample B − 1 − i):
//   Mixup:  x ← λ·x + (1 − λ)·x'
//   CutMix: x[:, :, y0:y1, x0:x1] ← x'[:, :, y0:y1, x0:x1] for a box of side √(1 − λ) of the
//           image's, centred at cy ~ U{0..H−1}, cx ~ U{0..W−1}, clipped to the image; with
//           correct_lam, λ ← 1 − box area / (H·W).
// Soft targets (B, num_classes): λ·smooth(y) + (1 − λ)·smooth(y.flip(0)), where smooth(y)
// is ε/C off the label and 1 − ε + ε/C on it (timm's mixup_target, ε = label_smoothing).
#pragma once
#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"

namespace sima {

struct MixupOptions {
  double mixup_alpha = 0.8;
  double cutmix_alpha = 1.0;
  double prob = 1.0;         // of mixing a batch at all
  double switch_prob = 0.5;  // of CutMix instead of Mixup when both are enabled
  double label_smoothing = 0.1;
  bool correct_lam = true;  // λ from the clipped CutMix box
  int64_t num_classes = 1000;
};

struct CutmixBox {
  int64_t y0 = 0, y1 = 0, x0 = 0, x1 = 0;  // rows [y0, y1), columns [x0, x1)
};

struct MixupResult {
  Tensor images;   // (B, C, H, W), a new tensor
  Tensor targets;  // (B, num_classes), rows sum to 1
  double lam = 1.0;
  bool cutmix = false;
  CutmixBox box;  // when cutmix
};

// Soft targets λ·smooth(y) + (1 − λ)·smooth(y.flip(0)) as a (B, num_classes) tensor.
Tensor mixup_target(const std::vector<int64_t>& labels, int64_t num_classes, double lam, double smoothing);
// timm's rand_bbox: cut = (int(H·√(1 − λ)), int(W·√(1 − λ))), centre ~ U{0..H−1} × U{0..W−1},
// y0 = clip(cy − cut_h//2, 0, H), y1 = clip(cy + cut_h//2, 0, H), same for x.
CutmixBox rand_bbox(int64_t height, int64_t width, double lam, Generator& gen);
// A Beta(a, b) sample (a, b > 0), from two Gamma samples (Marsaglia–Tsang).
double sample_beta(double a, double b, Generator& gen);

class Mixup {
 public:
  explicit Mixup(const MixupOptions& options = {});
  // images (B, C, H, W) with B even, labels (B) in [0, num_classes).
  MixupResult operator()(const Tensor& images, const std::vector<int64_t>& labels, Generator& gen) const;
  const MixupOptions& options() const { return options_; }

 private:
  MixupOptions options_;
};

}  // namespace sima
