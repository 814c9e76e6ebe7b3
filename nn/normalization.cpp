#include "nn/normalization.h"

#include "core/ops/shape_ops.h"

#include "core/error.h"
#include "core/ops/norm.h"

namespace sima {

LayerNorm::LayerNorm(int64_t d, float e, bool affine, bool with_bias) : Module("LayerNorm"), dim(d), eps(e) {
  check(d > 0 && e > 0.f, "LayerNorm: dim (", d, ") and eps (", e, ") must be positive");
  if (affine) {
    weight = register_parameter("weight", ones({d}));
    if (with_bias) bias = register_parameter("bias", zeros({d}));
  }
}

Tensor LayerNorm::forward(const Tensor& x) {
  check(x.dim() >= 1 && x.size(-1) == dim, "LayerNorm: input ", x.shape(), " must end in ", dim);
  return layer_norm(x, weight, bias, eps);
}

BatchNorm2d::BatchNorm2d(int64_t c, float e, float m)
    : Module("BatchNorm2d"), num_features(c), eps(e), momentum(m) {
  check(c > 0 && e > 0.f && m >= 0.f && m <= 1.f, "BatchNorm2d: need num_features > 0, eps > 0, "
        "momentum in [0, 1] (got ", c, ", ", e, ", ", m, ")");
  weight = register_parameter("weight", ones({c}));
  bias = register_parameter("bias", zeros({c}));
  running_mean = register_buffer("running_mean", zeros({c}));
  running_var = register_buffer("running_var", ones({c}));
  num_batches_tracked = register_buffer("num_batches_tracked", zeros({}));
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  check(x.dim() == 4 && x.size(1) == num_features, "BatchNorm2d: input ", x.shape(),
        " must be (B, ", num_features, ", H, W)");
  if (is_training()) num_batches_tracked.data()[0] += 1.f;
  if (is_training() && sync) return sync_batch_norm(x, weight, bias, running_mean, running_var, momentum, eps, sync);
  return batch_norm2d(x, weight, bias, running_mean, running_var, is_training(), momentum, eps);
}

Tensor BatchNorm2d::forward_channels_last(const Tensor& x) {
  check(x.dim() >= 2 && x.size(-1) == num_features, "BatchNorm2d: channels-last input ", x.shape(),
        " must end in ", num_features);
  if (is_training()) num_batches_tracked.data()[0] += 1.f;
  // (..., C) -> (R, C): batch_norm2d's (B, C) case, the statistics over the R rows
  Tensor rows = reshape(x, {x.numel() / num_features, num_features});
  if (is_training() && sync)
    return reshape(sync_batch_norm(rows, weight, bias, running_mean, running_var, momentum, eps, sync),
                   x.shape().vec());
  return reshape(batch_norm2d(rows, weight, bias, running_mean, running_var, is_training(), momentum, eps),
                 x.shape().vec());
}

}  // namespace sima
