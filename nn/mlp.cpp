#include "nn/mlp.h"

namespace sima {

Mlp::Mlp(int64_t in, int64_t hidden, int64_t out, const std::string& act_name, float drop)
    : Module("Mlp") {
  if (out == 0) out = in;
  fc1 = register_module("fc1", std::make_shared<Linear>(in, hidden));
  act = register_module("act", make_activation(act_name));
  drop1 = register_module("drop1", std::make_shared<Dropout>(drop));
  fc2 = register_module("fc2", std::make_shared<Linear>(hidden, out));
  drop2 = register_module("drop2", std::make_shared<Dropout>(drop));
}

Tensor Mlp::forward(const Tensor& x) {
  return drop2->forward(fc2->forward(drop1->forward(act->forward(fc1->forward(x)))));
}

}  // namespace sima
