// nn.Conv2d (groups; depthwise when groups == in == out).
#pragma once
#include <memory>

#include "core/ops/lowp_conv.h"
#include "nn/module.h"

namespace sima {

class Conv2d : public Module {
 public:
  // PyTorch's default init: kaiming_uniform(a=√5) weight, U(±1/√fan_in) bias.
  Conv2d(int64_t in_channels, int64_t out_channels, int kernel_size, int stride = 1, int padding = 0,
         int groups = 1, bool bias = true);
  Tensor forward(const Tensor& x) override;  // (B, in, H, W) -> (B, out, Ho, Wo)
  int64_t in_channels, out_channels;
  int kernel_size, stride, padding, groups;
  Tensor weight, bias;  // (out, in/groups, k, k), (out) or undefined
  // Inference through oneDNN's convolution (models/quantized.h), as Linear::lowp: when set,
  // forward runs it whenever no gradient is asked for. It holds its own copy of the weights.
  std::shared_ptr<const LowpConv2d> lowp;
};

}  // namespace sima
