// Convolution and pooling on NCHW tensors.
#pragma once
#include "core/tensor.h"

namespace sima {

// F.conv2d: x (B, Cin, H, W), weight (Cout, Cin/groups, kh, kw), bias (Cout) or undefined.
// im2col + GEMM per group; groups == Cin == Cout (depthwise) has its own direct kernel.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), int stride = 1,
              int padding = 0, int groups = 1);

// F.avg_pool2d with count_include_pad=True; stride 0 means stride = kernel.
Tensor avg_pool2d(const Tensor& x, int kernel, int stride = 0, int padding = 0);

}  // namespace sima
