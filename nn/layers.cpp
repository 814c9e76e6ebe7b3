#include "nn/layers.h"

#include "core/error.h"
#include "core/ops/activation.h"
#include "core/ops/dropout.h"
#include "core/ops/elementwise.h"

namespace sima {

Tensor GELU::forward(const Tensor& x) { return gelu(x); }
Tensor QuickGELU::forward(const Tensor& x) { return quick_gelu(x); }
Tensor ReLU::forward(const Tensor& x) { return relu(x); }

std::shared_ptr<Module> make_activation(const std::string& name) {
  if (name == "gelu") return std::make_shared<GELU>();
  if (name == "quick_gelu") return std::make_shared<QuickGELU>();
  if (name == "relu") return std::make_shared<ReLU>();
  fail("activation '", name, "' is unknown (allowed: gelu, quick_gelu, relu)");
}

Dropout::Dropout(float prob) : Module("Dropout"), p(prob) {
  check(p >= 0.f && p <= 1.f, "Dropout: p must be in [0, 1], got ", p);
}
Tensor Dropout::forward(const Tensor& x) { return dropout(x, p, is_training()); }

DropPath::DropPath(float prob) : Module("DropPath"), p(prob) {
  check(p >= 0.f && p < 1.f, "DropPath: p must be in [0, 1), got ", p);
}
Tensor DropPath::forward(const Tensor& x) { return drop_path(x, p, is_training()); }

LayerScale::LayerScale(int64_t dim, float init_values) : Module("LayerScale") {
  check(dim > 0, "LayerScale: dim must be positive, got ", dim);
  gamma = register_parameter("gamma", full({dim}, init_values));
}
Tensor LayerScale::forward(const Tensor& x) { return mul(x, gamma); }

Sequential& Sequential::push_back(std::shared_ptr<Module> m) {
  add_child(std::to_string(named_children().size()), std::move(m));
  return *this;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (auto& [name, m] : named_children()) y = m->forward(y);
  return y;
}

}  // namespace sima
