// Shared by conv.cpp and conv_depthwise.cpp (internal header).
#pragma once
#include <algorithm>
#include <cstdint>

#include "core/tensor.h"

namespace sima {

// The sizes of one conv2d call: x (B, Cin, H, W), weight (Cout, Cin/groups, kh, kw),
// y (B, Cout, Ho, Wo) with Ho = (H + 2·pad - kh) / stride + 1.
struct ConvGeom {
  int64_t B, Cin, H, W, Cout, kh, kw, Ho, Wo, stride, pad, groups;
};

// The output positions o in [0, n_out) whose input position o·stride + off lies in
// [0, n_in), as [lo, hi): the taps that fall on padding are skipped, not multiplied by 0.
inline void valid_range(int64_t off, int64_t stride, int64_t n_in, int64_t n_out, int64_t& lo,
                        int64_t& hi) {
  lo = off >= 0 ? 0 : (-off + stride - 1) / stride;
  hi = n_in - off <= 0 ? 0 : std::min(n_out, (n_in - off + stride - 1) / stride);
  lo = std::min(lo, hi);
}

// groups == Cin == Cout: one kh×kw filter per channel, a direct loop (conv_depthwise.cpp).
Tensor conv2d_depthwise(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const ConvGeom& g);

}  // namespace sima
