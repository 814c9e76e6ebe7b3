// nn.Conv2d (groups; depthwise when groups == in == out).
#pragma once
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
};

}  // namespace sima
