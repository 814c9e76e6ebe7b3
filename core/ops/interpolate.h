// F.interpolate for NCHW tensors (position-embedding resizing, heatmap upsampling).
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace sima {

enum class InterpMode { Nearest, Bilinear, Bicubic };

// x (B, C, H, W) -> (B, C, out_h, out_w). Nearest uses PyTorch's 'nearest' rule
// (src = floor(dst · in/out)); bilinear and bicubic (A = -0.75, border-clamped taps)
// follow align_corners exactly as PyTorch does.
Tensor interpolate(const Tensor& x, int64_t out_h, int64_t out_w, InterpMode mode,
                   bool align_corners = false);

// The input indices and weights every output index reads along one axis, exactly as
// interpolate() uses them: `taps` per output (1 nearest, 2 bilinear, 4 bicubic),
// idx[o·taps + t] and w[o·taps + t]. Shared with data/'s image resize.
struct InterpTaps {
  int taps = 1;
  std::vector<int64_t> idx;
  std::vector<float> w;
};
InterpTaps interpolation_taps(int64_t in, int64_t out, InterpMode mode, bool align_corners = false);

}  // namespace sima
