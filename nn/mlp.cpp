#include "nn/mlp.h"

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops/elementwise.h"

namespace sima {

Mlp::Mlp(int64_t in, int64_t hidden, int64_t out, const std::string& act_name, float drop)
    : Module("Mlp") {
  if (out == 0) out = in;
  fc1 = register_module("fc1", std::make_shared<Linear>(in, hidden));
  act = register_module("act", make_activation(act_name));
  check(parse_mlp_activation(act_name, &act_kind_), "Mlp: activation '", act_name, "' has no fused kernel");
  drop1 = register_module("drop1", std::make_shared<Dropout>(drop));
  fc2 = register_module("fc2", std::make_shared<Linear>(hidden, out));
  drop2 = register_module("drop2", std::make_shared<Dropout>(drop));
}

Tensor Mlp::forward(const Tensor& x) {
  const bool dropping = is_training() && (drop1->p > 0.f || drop2->p > 0.f);
  // reduced precision (models/quantized.h) runs module by module, when no gradient is asked for
  const bool lowp = (fc1->lowp || fc2->lowp) && !needs_grad(x, fc1->weight, fc2->weight);
  if (fused && !dropping && !lowp) return fused_mlp(x, fc1->weight, fc1->bias, fc2->weight, fc2->bias, act_kind_);
  // fc1's activation applied in the pass that finishes its low-precision product; with both
  // layers reduced, the hidden layer stays in their precision between them (lowp_mlp)
  if (fused && lowp && !dropping && fc1->lowp && fc2->lowp) return lowp_mlp(*fc1->lowp, *fc2->lowp, x, act_kind_);
  if (fused && lowp && !dropping && fc1->lowp) return fc2->forward(fc1->lowp->forward(x, act_kind_));
  return drop2->forward(fc2->forward(drop1->forward(act->forward(fc1->forward(x)))));
}

Tensor Mlp::forward_add(const Tensor& x, const Tensor& residual) {
  const bool dropping = is_training() && (drop1->p > 0.f || drop2->p > 0.f);
  const bool lowp = fc1->lowp && fc2->lowp && !needs_grad(x, fc1->weight, fc2->weight) && !needs_grad(residual);
  if (fused && lowp && !dropping) return lowp_mlp(*fc1->lowp, *fc2->lowp, x, act_kind_, residual);
  return add(residual, forward(x));
}

}  // namespace sima
