// Stochastic regularisers; both are the identity in eval mode (training = false).
#pragma once
#include "core/rng.h"
#include "core/tensor.h"

namespace sima {

// F.dropout: zero each element with probability p, scale survivors by 1/(1-p).
Tensor dropout(const Tensor& x, float p, bool training, Generator& gen = rng(RngStream::Dropout));

// timm drop_path (stochastic depth): zero whole samples (dim 0) with probability p,
// scale the kept ones by 1/(1-p).
Tensor drop_path(const Tensor& x, float p, bool training, Generator& gen = rng(RngStream::Dropout));

}  // namespace sima
