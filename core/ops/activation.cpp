// Activations: y = f(x) elementwise, each with its derivative f'(x) written
// next to it (unary_op in elementwise_kernels.h applies gx = gy · f'(x)).
#include "core/ops/activation.h"

#include <cmath>

#include "core/error.h"
#include "core/ops/activation_fns.h"
#include "core/ops/elementwise_kernels.h"
#include "core/ops/vmath.h"

namespace sima {

// relu' = 1 where x > 0 (0 at 0, as PyTorch); the scalar functions are in activation_fns.h
Tensor relu(const Tensor& x) {
  return unary_op("relu", x, [](float v) { return ReluFn::f(v); },
                  [](float v, float) { return ReluFn::df(v); }, kGrainElementwise);
}

// relu6' = 1 on the open interval (0, 6)
Tensor relu6(const Tensor& x) {
  return unary_op("relu6", x, [](float v) { return v < 0.f ? 0.f : (v > 6.f ? 6.f : v); },
                  [](float v, float) { return v > 0.f && v < 6.f ? 1.f : 0.f; }, kGrainElementwise);
}

Tensor gelu(const Tensor& x) {
  return unary_op("gelu", x, [](float v) { return GeluFn::f(v); },
                  [](float v, float) { return GeluFn::df(v); });
}

Tensor quick_gelu(const Tensor& x) {
  return unary_op("quick_gelu", x, [](float v) { return QuickGeluFn::f(v); },
                  [](float v, float) { return QuickGeluFn::df(v); });
}

// elu(x) = x (x > 0), α(eˣ − 1) (x ≤ 0);  d/dx = 1 or α·eˣ = y + α
Tensor elu(const Tensor& x, float alpha) {
  return unary_op("elu", x, [alpha](float v) { return v > 0.f ? v : alpha * (exp_fast(v) - 1.f); },
                  [alpha](float v, float y) { return v > 0.f ? 1.f : y + alpha; });
}

// softplus(x) = log(1 + e^(βx))/β, = x where βx > threshold;  d/dx = σ(βx) (1 past threshold)
Tensor softplus(const Tensor& x, float beta, float threshold) {
  check(beta != 0.f, "softplus: beta must be non-zero");
  return unary_op("softplus", x,
                  [beta, threshold](float v) {
                    return beta * v > threshold ? v : std::log1p(std::exp(beta * v)) / beta;
                  },
                  [beta, threshold](float v, float) {
                    return beta * v > threshold ? 1.f : sigmoid_fast(beta * v);
                  });
}

// σ(x) = 1/(1 + e^−x);  σ' = y(1 − y)
Tensor sigmoid(const Tensor& x) {
  return unary_op("sigmoid", x, [](float v) { return sigmoid_fast(v); },
                  [](float, float y) { return y * (1.f - y); });
}

// tanh' = 1 − y²
Tensor tanh(const Tensor& x) {
  return unary_op("tanh", x, [](float v) { return std::tanh(v); },
                  [](float, float y) { return 1.f - y * y; });
}

}  // namespace sima
