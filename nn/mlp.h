// timm Mlp: fc1 -> act -> drop -> fc2 -> drop.
//
// Without active dropout the forward is one fused_mlp op (core/ops/fused_mlp.h), which
// recomputes act(fc1(x)) in the backward instead of keeping it; with dropout on in
// training it runs the modules one by one. Both give the same values and gradients.
#pragma once
#include <memory>
#include <string>

#include "core/ops/fused_mlp.h"
#include "nn/layers.h"
#include "nn/linear.h"

namespace sima {

class Mlp : public Module {
 public:
  // out_features 0 means in_features; act: "gelu" | "quick_gelu" | "relu".
  Mlp(int64_t in_features, int64_t hidden_features, int64_t out_features = 0,
      const std::string& act = "gelu", float drop = 0.f);
  Tensor forward(const Tensor& x) override;  // (..., in) -> (..., out)
  // residual + forward(x), the residual added by fc2 as it stores when both layers run reduced
  // (lowp_mlp); else add(residual, forward(x)), the same values.
  Tensor forward_add(const Tensor& x, const Tensor& residual);
  std::shared_ptr<Linear> fc1, fc2;
  std::shared_ptr<Module> act;
  std::shared_ptr<Dropout> drop1, drop2;
  // false: always run the modules one by one (the oracle the fused path is tested against).
  bool fused = true;

 private:
  MlpActivation act_kind_ = MlpActivation::Gelu;
};

}  // namespace sima
