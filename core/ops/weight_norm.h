// Weight normalisation (torch.nn.utils.weight_norm with dim = 0, i.e. torch._weight_norm):
// every output row of a weight is re-parametrised by a direction v_r and a length g_r,
//
//   W_r = g_r · v_r / ‖v_r‖₂            v (R, ...) -> W like v,  g (R, 1, ..., 1)
//
// DINO's head ends in a weight-normalised Linear(bottleneck, K, bias=False) whose g is
// frozen at 1 (norm_last_layer): every prototype row then has unit length.
// As in PyTorch there is no eps: a row of v that is all zeros gives a non-finite W.
#pragma once
#include "core/tensor.h"

namespace sima {

// v: at least 1-D, R = v.size(0) rows of v.numel()/R values; g: R values of shape
// (R, 1, ..., 1) with v's number of dims (the shape torch's weight_g has). One fused node.
Tensor weight_norm(const Tensor& v, const Tensor& g);

}  // namespace sima
