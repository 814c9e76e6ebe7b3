// F.interpolate for NCHW tensors (position-embedding resizing, heatmap upsampling).
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace sima {

enum class InterpMode { Nearest, Bilinear, Bicubic };

// x (B, C, H, W) -> (B, C, out_h, out_w). Nearest uses PyTorch's 'nearest' rule
// (src = floor(dst · in/out)); bilinear and bicubic (A = -0.75, border-clamped taps)
// follow align_corners exactly as PyTorch does.
Tensor interpolate(const Tensor& x, int64_t out_h, int64_t out_w, InterpMode mode,
                   bool align_corners = false);

}  // namespace sima
