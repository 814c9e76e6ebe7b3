#include "models/pos_encoding.h"

#include <cmath>

#include "core/error.h"
#include "core/ops/shape_ops.h"

namespace sima {

Tensor fourier_features(int64_t H, int64_t W, int64_t hidden_dim, float temperature) {
  check(H > 0 && W > 0, "fourier_features: grid ", H, "x", W, " must be non-empty");
  check(hidden_dim > 0 && hidden_dim % 2 == 0, "fourier_features: hidden_dim must be positive and even, got ",
        hidden_dim);
  const double two_pi = 2.0 * M_PI, eps = 1e-6;
  Tensor out = empty({1, 2 * hidden_dim, H, W});
  float* o = out.data();
  for (int64_t c = 0; c < hidden_dim; ++c) {
    const double t = std::pow(static_cast<double>(temperature), 2.0 * (c / 2) / hidden_dim);
    const bool use_sin = c % 2 == 0;
    float* py = o + c * H * W;                 // channel c: from the row index
    float* px = o + (hidden_dim + c) * H * W;  // channel hidden_dim + c: from the column index
    for (int64_t i = 0; i < H; ++i)
      for (int64_t j = 0; j < W; ++j) {
        const double y = (i + 1) / (H + eps) * two_pi / t, x = (j + 1) / (W + eps) * two_pi / t;
        py[i * W + j] = static_cast<float>(use_sin ? std::sin(y) : std::cos(y));
        px[i * W + j] = static_cast<float>(use_sin ? std::sin(x) : std::cos(x));
      }
  }
  return out;
}

PositionalEncodingFourier::PositionalEncodingFourier(int64_t dim, int64_t hidden_dim, float temperature)
    : Module("PositionalEncodingFourier"), dim(dim), hidden_dim(hidden_dim), temperature(temperature) {
  check(dim > 0, "PositionalEncodingFourier: dim must be positive, got ", dim);
  check(hidden_dim > 0 && hidden_dim % 2 == 0,
        "PositionalEncodingFourier: hidden_dim must be positive and even, got ", hidden_dim);
  token_projection = register_module("token_projection", std::make_shared<Conv2d>(2 * hidden_dim, dim, 1));
}

Tensor PositionalEncodingFourier::forward(int64_t H, int64_t W) {
  Tensor pos = token_projection->forward(fourier_features(H, W, hidden_dim, temperature));  // (1, D, H, W)
  return transpose(flatten(pos, 2), 1, 2);                                                   // (1, H·W, D)
}

}  // namespace sima
