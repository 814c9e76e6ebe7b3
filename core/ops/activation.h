// Activations (PyTorch semantics), elementwise with hand-written derivatives.
#pragma once
#include "core/tensor.h"

namespace sima {

Tensor relu(const Tensor& x);
Tensor relu6(const Tensor& x);        // min(max(x, 0), 6)
Tensor gelu(const Tensor& x);         // exact: x·Φ(x) = x·(1 + erf(x/√2))/2
Tensor quick_gelu(const Tensor& x);   // x·σ(1.702x) (CLIP/CvT)
Tensor elu(const Tensor& x, float alpha = 1.0f);
// softplus(x) = log(1 + exp(βx))/β, linear (x) where βx > threshold, as PyTorch.
Tensor softplus(const Tensor& x, float beta = 1.0f, float threshold = 20.0f);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);

}  // namespace sima
