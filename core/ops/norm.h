// Normalisation ops, each fused into one node with a hand-derived backward.
#pragma once
#include "core/tensor.h"

namespace sima {

// F.layer_norm over the last dim: (x - mean) / sqrt(var + eps) · weight + bias, with the
// biased variance. weight, bias of shape (C) or undefined.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps = 1e-5f);

// F.batch_norm for x (B, C, H, W) (or (B, C)). training: normalise with the batch's
// statistics (biased variance) and, if running stats are given, update them in place:
// running = (1 - momentum)·running + momentum·batch_stat, with the unbiased variance.
// eval: normalise with the running statistics. weight, bias (C) or undefined.
Tensor batch_norm2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                    const Tensor& running_mean, const Tensor& running_var, bool training,
                    float momentum = 0.1f, float eps = 1e-5f);

// F.normalize: x / max(‖x‖_p, eps) along dim, p ∈ {1, 2}.
Tensor normalize(const Tensor& x, float p = 2.0f, int dim = 1, float eps = 1e-12f);

}  // namespace sima
