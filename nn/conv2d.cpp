#include "nn/conv2d.h"

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops/conv.h"
#include "nn/init.h"

namespace sima {

Conv2d::Conv2d(int64_t in, int64_t out, int k, int s, int p, int g, bool has_bias)
    : Module("Conv2d"), in_channels(in), out_channels(out), kernel_size(k), stride(s), padding(p), groups(g) {
  check(in > 0 && out > 0 && k > 0 && s > 0 && p >= 0 && g > 0, "Conv2d: invalid arguments in=", in,
        " out=", out, " kernel=", k, " stride=", s, " padding=", p, " groups=", g);
  check(in % g == 0 && out % g == 0, "Conv2d: groups ", g, " must divide in_channels ", in,
        " and out_channels ", out);
  weight = register_parameter("weight", empty({out, in / g, k, k}));
  kaiming_uniform_(weight);
  if (has_bias) {
    bias = register_parameter("bias", empty({out}));
    default_bias_(bias, weight);
  }
}

Tensor Conv2d::forward(const Tensor& x) {
  if (lowp && !needs_grad(x, weight, bias)) return lowp->forward(x);
  return conv2d(x, weight, bias, stride, padding, groups);
}

}  // namespace sima
