// nn.Linear: y = x Wᵀ + b. weight (out, in), bias (out).
#pragma once
#include <memory>

#include "core/ops/lowp_gemm.h"
#include "nn/module.h"

namespace sima {

class Linear : public Module {
 public:
  // Initialised as PyTorch does (kaiming_uniform a=√5, bias U(±1/√in)); models that
  // want timm's trunc_normal(.02) / zero bias re-initialise (see init.h).
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) override;  // (..., in) -> (..., out)
  // residual + forward(x): with lowp and no gradient, the residual is added as the product is
  // stored (LowpLinear::forward_add); else add(residual, forward(x)), the same values.
  Tensor forward_add(const Tensor& x, const Tensor& residual);
  int64_t in_features, out_features;
  Tensor weight, bias;  // bias undefined when bias = false
  // Reduced-precision inference (models/precision.h): when set, forward runs it whenever no
  // gradient is asked for (else the float32 path). It holds its own copy of the weights
  // (quantized or rounded), made when it was set: set it again after changing `weight`.
  std::shared_ptr<const LowpLinear> lowp;
  // The int8 weights of a quantized checkpoint (models/quantized.h), which int8 inference uses
  // instead of quantizing `weight` (their dequantized values) again.
  std::shared_ptr<const LowpLinear> stored_int8;
};

}  // namespace sima
