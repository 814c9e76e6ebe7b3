// timm Mlp: fc1 -> act -> drop -> fc2 -> drop.
#pragma once
#include <memory>
#include <string>

#include "nn/layers.h"
#include "nn/linear.h"

namespace sima {

class Mlp : public Module {
 public:
  // out_features 0 means in_features; act: "gelu" | "quick_gelu" | "relu".
  Mlp(int64_t in_features, int64_t hidden_features, int64_t out_features = 0,
      const std::string& act = "gelu", float drop = 0.f);
  Tensor forward(const Tensor& x) override;  // (..., in) -> (..., out)
  std::shared_ptr<Linear> fc1, fc2;
  std::shared_ptr<Module> act;
  std::shared_ptr<Dropout> drop1, drop2;
};

}  // namespace sima
