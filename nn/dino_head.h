// DINO's projection head (facebookresearch/dino vision_transformer.py, DINOHead), with
// the parameter names of its state dict:
//
//   mlp.0  Linear(in_dim, hidden)       ┐
//   mlp.1  GELU                         │ nlayers = 3 (DINO's default, no BatchNorm):
//   mlp.2  Linear(hidden, hidden)       │ nlayers − 2 hidden Linear+GELU pairs
//   mlp.3  GELU                         │ (nlayers = 1: "mlp" is one Linear(in_dim, bottleneck))
//   mlp.4  Linear(hidden, bottleneck)   ┘
//   ℓ2-normalise over the last dim (F.normalize, eps 1e-12)
//   last_layer  weight_norm(Linear(bottleneck, out_dim, bias=False)):
//               last_layer.weight_g (out_dim, 1), last_layer.weight_v (out_dim, bottleneck)
//
// Init as DINO: the mlp Linears trunc_normal(std .02) with zero bias; weight_v keeps
// PyTorch's default Linear init (kaiming_uniform a = √5: the last layer is created after
// DINO applies its init); weight_g = 1. With norm_last_layer, weight_g does not require
// grad (frozen at 1: every prototype row of W has unit length), so the optimizer leaves
// it out; without it, weight_g is trained.
#pragma once
#include <cstdint>
#include <memory>

#include "nn/module.h"

namespace sima {

struct DINOHeadOptions {
  int64_t in_dim = 384;          // the backbone's feature width D
  int64_t out_dim = 65536;       // K, the number of prototypes
  int64_t hidden_dim = 2048;
  int64_t bottleneck_dim = 256;
  int64_t nlayers = 3;           // Linear layers in the mlp (>= 1)
  bool norm_last_layer = true;   // freeze weight_g at 1
};

// A Linear without bias under torch.nn.utils.weight_norm(dim = 0):
// W = weight_g · weight_v / ‖weight_v‖ per output row (core/ops/weight_norm.h).
class WeightNormLinear : public Module {
 public:
  WeightNormLinear(int64_t in_features, int64_t out_features);
  Tensor forward(const Tensor& x) override;  // (..., in) -> (..., out)
  Tensor weight() const;                     // W as the forward uses it (out, in)
  int64_t in_features, out_features;
  Tensor weight_g, weight_v;  // (out, 1), (out, in); registered in this order, as torch does
};

class DINOHead : public Module {
 public:
  explicit DINOHead(const DINOHeadOptions& options);
  Tensor forward(const Tensor& x) override;  // (N, in_dim) -> (N, out_dim)
  const DINOHeadOptions& options() const { return options_; }
  std::shared_ptr<Module> mlp;  // a Sequential, or one Linear when nlayers = 1
  std::shared_ptr<WeightNormLinear> last_layer;

 private:
  DINOHeadOptions options_;
};

}  // namespace sima
