// Small layers: activations, dropout, drop path, identity, LayerScale, Sequential.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "nn/module.h"

namespace sima {

class GELU : public Module {
 public:
  GELU() : Module("GELU") {}
  Tensor forward(const Tensor& x) override;
};
class QuickGELU : public Module {  // x·σ(1.702x), CvT's MLP activation
 public:
  QuickGELU() : Module("QuickGELU") {}
  Tensor forward(const Tensor& x) override;
};
class ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Tensor forward(const Tensor& x) override;
};
// "gelu" | "quick_gelu" | "relu" -> the module; anything else is an error listing these.
std::shared_ptr<Module> make_activation(const std::string& name);

class Identity : public Module {
 public:
  Identity() : Module("Identity") {}
  Tensor forward(const Tensor& x) override { return x; }
};

class Dropout : public Module {  // identity in eval mode
 public:
  explicit Dropout(float p = 0.5f);
  Tensor forward(const Tensor& x) override;
  float p;
};

class DropPath : public Module {  // stochastic depth per sample; identity in eval mode
 public:
  explicit DropPath(float p = 0.f);
  Tensor forward(const Tensor& x) override;
  float p;
};

// y = x ⊙ gamma, gamma (dim) initialised to init_values (timm LayerScale).
class LayerScale : public Module {
 public:
  explicit LayerScale(int64_t dim, float init_values = 1e-5f);
  Tensor forward(const Tensor& x) override;
  Tensor gamma;
};

// Children named "0", "1", ... run in order.
class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  Sequential& push_back(std::shared_ptr<Module> m);
  Tensor forward(const Tensor& x) override;
  size_t size() const { return named_children().size(); }
};

}  // namespace sima
