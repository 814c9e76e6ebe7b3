// SyncBatchNorm's op: batch_norm2d in training mode with the statistics of the batch of every
// process of a data-parallel job (train/distributed/distributed.h), as torch.nn.SyncBatchNorm.
#pragma once
#include <functional>

#include "core/tensor.h"

namespace sima {

// In place: data = Σ over the processes of data (n doubles). The identity for one process.
using SumAcrossFn = std::function<void(double* data, int64_t n)>;

// x (B, C, *) or (B, C); weight, bias, running_mean, running_var (C) or undefined (the
// running stats updated in place as batch_norm2d does). The mean and the biased variance are
// taken over the N = Σ_p B_p·HW values of channel c on all processes; backward sums the two
// per-channel gradient sums over the processes too. dweight and dbias are this process's
// part (the gradient averaging of the trainer sums them). Collectives, in order: forward 2,
// backward 1 — every process must call this op the same number of times.
Tensor sync_batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                       const Tensor& running_var, float momentum, float eps, const SumAcrossFn& sum_across);

}  // namespace sima
