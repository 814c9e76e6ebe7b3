// DINOHead (see dino_head.h).
#include "nn/dino_head.h"

#include "core/error.h"
#include "core/ops/matmul.h"
#include "core/ops/norm.h"
#include "core/ops/weight_norm.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "nn/linear.h"

namespace sima {

WeightNormLinear::WeightNormLinear(int64_t in, int64_t out)
    : Module("WeightNormLinear"), in_features(in), out_features(out) {
  check(in > 0 && out > 0, "WeightNormLinear: in_features and out_features must be positive (got ", in, ", ", out,
        ")");
  // torch.nn.utils.weight_norm registers weight_g = ‖weight row‖ then weight_v = weight;
  // DINO then fills weight_g with 1.
  weight_g = register_parameter("weight_g", ones({out, 1}));
  weight_v = register_parameter("weight_v", empty({out, in}));
  kaiming_uniform_(weight_v);  // nn.Linear's default init of the wrapped weight
}

Tensor WeightNormLinear::weight() const { return weight_norm(weight_v, weight_g); }

Tensor WeightNormLinear::forward(const Tensor& x) { return linear(x, weight()); }

namespace {

std::shared_ptr<Linear> dino_linear(int64_t in, int64_t out) {
  auto l = std::make_shared<Linear>(in, out);
  trunc_normal_(l->weight, 0.02f);  // DINOHead._init_weights
  zeros_(l->bias);
  return l;
}

}  // namespace

DINOHead::DINOHead(const DINOHeadOptions& o) : Module("DINOHead"), options_(o) {
  check(o.in_dim > 0 && o.out_dim > 0 && o.hidden_dim > 0 && o.bottleneck_dim > 0, "DINOHead: in_dim (", o.in_dim,
        "), out_dim (", o.out_dim, "), hidden_dim (", o.hidden_dim, ") and bottleneck_dim (", o.bottleneck_dim,
        ") must be positive");
  check(o.nlayers >= 1, "DINOHead: nlayers must be >= 1, got ", o.nlayers);
  if (o.nlayers == 1) {
    mlp = register_module("mlp", dino_linear(o.in_dim, o.bottleneck_dim));
  } else {
    auto seq = std::make_shared<Sequential>();
    seq->push_back(dino_linear(o.in_dim, o.hidden_dim)).push_back(std::make_shared<GELU>());
    for (int64_t i = 0; i < o.nlayers - 2; ++i)
      seq->push_back(dino_linear(o.hidden_dim, o.hidden_dim)).push_back(std::make_shared<GELU>());
    seq->push_back(dino_linear(o.hidden_dim, o.bottleneck_dim));
    mlp = register_module("mlp", seq);
  }
  last_layer = register_module("last_layer", std::make_shared<WeightNormLinear>(o.bottleneck_dim, o.out_dim));
  if (o.norm_last_layer) last_layer->weight_g.requires_grad_(false);
}

Tensor DINOHead::forward(const Tensor& x) {
  check(x.dim() == 2 && x.size(1) == options_.in_dim, "DINOHead: input ", x.shape(), " must be (N, ",
        options_.in_dim, ")");
  Tensor z = mlp->forward(x);         // (N, bottleneck)
  z = normalize(z, 2.f, -1, 1e-12f);  // F.normalize(x, dim=-1, p=2)
  return last_layer->forward(z);      // (N, out_dim)
}

}  // namespace sima
