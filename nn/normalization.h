// nn.LayerNorm (over the last dim) and nn.BatchNorm2d.
#pragma once
#include "core/ops/sync_batch_norm.h"
#include "nn/module.h"

namespace sima {

class LayerNorm : public Module {
 public:
  // bias = false: weight only (PyTorch's LayerNorm(bias=False), Flax's use_bias=False).
  explicit LayerNorm(int64_t dim, float eps = 1e-5f, bool elementwise_affine = true, bool bias = true);
  Tensor forward(const Tensor& x) override;  // (..., dim) -> (..., dim)
  int64_t dim;
  float eps;
  Tensor weight, bias;  // ones / zeros; undefined without affine (bias: or without bias)
};

// Training: normalises with the batch statistics over (B, H, W) and updates the running
// ones (momentum, unbiased variance); eval: normalises with the running statistics.
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t num_features, float eps = 1e-5f, float momentum = 0.1f);
  Tensor forward(const Tensor& x) override;  // (B, C, H, W) -> same
  // The same normalisation of a channels-last x (..., C): statistics per channel over all
  // the other positions, as forward() takes them over (B, H, W).
  Tensor forward_channels_last(const Tensor& x);
  int64_t num_features;
  float eps, momentum;
  Tensor weight, bias;                 // parameters: ones / zeros
  Tensor running_mean, running_var;    // buffers: zeros / ones
  Tensor num_batches_tracked;          // buffer, 0-d: training forwards so far (as PyTorch's)
  // SyncBatchNorm: when set, training takes the statistics over every process's batch through
  // it (core/ops/sync_batch_norm.h; set by train/distributed/distributed.h, convert_sync_batchnorm).
  SumAcrossFn sync;
};

}  // namespace sima
