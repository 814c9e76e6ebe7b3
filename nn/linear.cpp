#include "nn/linear.h"

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops/elementwise.h"
#include "core/ops/matmul.h"
#include "nn/init.h"

namespace sima {

Linear::Linear(int64_t in, int64_t out, bool has_bias)
    : Module("Linear"), in_features(in), out_features(out) {
  check(in > 0 && out > 0, "Linear: in_features and out_features must be positive (got ", in, ", ", out, ")");
  weight = register_parameter("weight", empty({out, in}));
  kaiming_uniform_(weight);
  if (has_bias) {
    bias = register_parameter("bias", empty({out}));
    default_bias_(bias, weight);
  }
}

Tensor Linear::forward(const Tensor& x) {
  if (lowp && !needs_grad(x, weight, bias)) return lowp->forward(x);
  return linear(x, weight, bias);
}

Tensor Linear::forward_add(const Tensor& x, const Tensor& residual) {
  if (lowp && !needs_grad(x, weight, bias) && !needs_grad(residual)) return lowp->forward_add(x, residual);
  return add(residual, forward(x));
}

}  // namespace sima
