// Inference convolutions through oneDNN's convolution primitive (Debian libdnnl 2.6): the
// patch embeddings' and CvT's convolutions when a model runs at reduced precision or with
// packed float32 weights (models/quantized.h, docs/precision.md). Inference only: nothing here
// records a graph.
#pragma once
#include <cstdint>
#include <memory>

#include "core/ops/quantize.h"
#include "core/tensor.h"

namespace sima {

enum class ConvLayout { NCHW, NHWC };  // (B, C, H, W), or channels last (B, H, W, C)

// y = conv2d(x, W, stride, padding, groups) + b, W prepared once for oneDNN and kept:
//   BF16       where oneDNN has native bf16 convolutions (bf16_native(): AVX512-BF16 or AMX),
//              x and W rounded to bfloat16, float32 sums and output; float32 elsewhere.
//   F32, Int8  float32 (oneDNN's int8 convolutions would need static activation scales:
//              docs/precision.md).
// A depthwise convolution (groups = Cin = Cout) runs float32 at every precision: oneDNN's bf16
// depthwise kernel was slower than its float32 one on CvT's projections (rounding the input
// costs more than nine products per value save; docs/precision.md).
// The primitive depends on the input's shape and the layouts, so one is made per kind of call
// seen and kept with its packed weights, as LowpLinear does per row count.
class LowpConv2d {
 public:
  // weight (Cout, Cin/groups, k, k), bias (Cout) or undefined; a copy of both is kept.
  LowpConv2d(Precision p, const Tensor& weight, const Tensor& bias, int stride, int padding, int groups);
  // x (B, Cin, H, W) or, with in = NHWC, (B, H, W, Cin) -> y (B, Cout, Ho, Wo) or, with
  // out = NHWC, (B, Ho, Wo, Cout): a channels-last output is a CvT stage's tokens (B, HoWo, Cout)
  // without a permute.
  Tensor forward(const Tensor& x, ConvLayout in = ConvLayout::NCHW, ConvLayout out = ConvLayout::NCHW) const;
  bool runs_bf16() const;  // true: bf16 operands; false: float32

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace sima
