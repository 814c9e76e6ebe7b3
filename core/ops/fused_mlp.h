// The transformer MLP as one op: y = fc2(act(fc1(x))), with the hidden activation
// recomputed in the backward instead of kept.
//
// Composed from linear + gelu + linear, the autograd graph keeps, per block, both the
// fc1 output h and the activation a = act(h) (fc2's backward needs a for dW2): two
// R×H tensors, H = 4C, the largest activations of a ViT. This op keeps only h and
// recomputes a = act(h) in the backward (one cheap elementwise pass), halving that
// memory. The composition stays the oracle: tests check this op against it.
#pragma once
#include "core/tensor.h"

namespace sima {

enum class MlpActivation { Gelu, QuickGelu, Relu };

// x (..., in), w1 (H, in), b1 (H), w2 (out, H), b2 (out) -> (..., out)
//   = linear(act(linear(x, w1, b1)), w2, b2)
Tensor fused_mlp(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2,
                 const Tensor& b2, MlpActivation act);

// "gelu" | "quick_gelu" | "relu" -> the enum; false for any other name.
bool parse_mlp_activation(const std::string& name, MlpActivation* out);

}  // namespace sima
