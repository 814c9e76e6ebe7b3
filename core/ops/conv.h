// Convolution and pooling on NCHW tensors (and one channels-last depthwise conv).
#pragma once
#include "core/tensor.h"

namespace sima {

// F.conv2d: x (B, Cin, H, W), weight (Cout, Cin/groups, kh, kw), bias (Cout) or undefined.
// im2col + GEMM per group; groups == Cin == Cout (depthwise) has its own direct kernel.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), int stride = 1,
              int padding = 0, int groups = 1);

// Depthwise conv2d on a channels-last grid: x (B, H, W, C), weight (C, 1, kh, kw), bias (C)
// or undefined -> (B, Ho, Wo, C). The same function as permuting x to NCHW, conv2d with
// groups = C and permuting back, without the permutes (conv_depthwise_nhwc.cpp).
Tensor conv2d_depthwise_channels_last(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                                      int stride = 1, int padding = 0);

// SOFT's depthwise conv of v over the heads: x (B, h, H·W, d), weight (h, 1, kh, kw), stride 1
// -> (B, h, Ho·Wo, d). The same function as permuting x to (B·d, h, H, W), conv2d with
// groups = h and permuting back (y and dx bit for bit), without the permutes (conv_depthwise_heads.cpp).
Tensor conv2d_depthwise_heads(const Tensor& x, const Tensor& weight, int64_t H, int64_t W, int padding);

// F.avg_pool2d with count_include_pad=True; stride 0 means stride = kernel.
Tensor avg_pool2d(const Tensor& x, int kernel, int stride = 0, int padding = 0);

}  // namespace sima
