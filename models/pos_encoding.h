// XCiT's Fourier positional encoding (timm PositionalEncodingFourier), for any token grid.
//
// For grid row i < H and column j < W (docs/models.md §3):
//   y = (i+1) / (H + 1e-6) · 2π,   x = (j+1) / (W + 1e-6) · 2π
//   t_c = temperature^(2⌊c/2⌋ / hidden_dim),  c < hidden_dim
//   pos_y[c] = sin(y / t_c) for even c, cos(y / t_c) for odd c   (pos_x likewise)
//   features = cat(pos_y, pos_x)  (2·hidden_dim channels)  -> token_projection, a 1×1 Conv2d
// The features are constants of (H, W), recomputed per call, so another input size just works.
#pragma once
#include <cstdint>
#include <memory>

#include "nn/conv2d.h"
#include "nn/module.h"

namespace sima {

// The 2·hidden_dim Fourier features of an H × W grid: (1, 2·hidden_dim, H, W), no grad.
Tensor fourier_features(int64_t H, int64_t W, int64_t hidden_dim = 32, float temperature = 10000.f);

class PositionalEncodingFourier : public Module {
 public:
  explicit PositionalEncodingFourier(int64_t dim, int64_t hidden_dim = 32, float temperature = 10000.f);
  // -> (1, H·W, dim), tokens row-major over the grid; broadcasts over the batch when added.
  Tensor forward(int64_t H, int64_t W);
  std::shared_ptr<Conv2d> token_projection;  // Conv2d(2·hidden_dim, dim, 1), PyTorch default init
  int64_t dim, hidden_dim;
  float temperature;
};

}  // namespace sima
