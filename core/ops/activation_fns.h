// The scalar activation functions and their derivatives, shared by the elementwise
// activation ops (activation.cpp) and the fused MLP (fused_mlp.cpp), which applies
// them in its own loops. Each is a struct with
//   f(x)  the activation,   df(x)  its derivative at x
// inlined into the callers' loops so the compiler vectorises them.
#pragma once
#include "core/ops/vmath.h"

namespace sima {

struct ReluFn {  // relu' = 1 where x > 0 (0 at 0, as PyTorch)
  static float f(float x) { return x > 0.f ? x : 0.f; }
  static float df(float x) { return x > 0.f ? 1.f : 0.f; }
};

// gelu(x) = x·Φ(x), Φ(x) = (1 + erf(x/√2))/2
// gelu'(x) = Φ(x) + x·φ(x), φ(x) = e^(−x²/2)/√(2π)
struct GeluFn {
  static constexpr float kInvSqrt2 = 0.70710678118654752f;    // 1/√2
  static constexpr float kInvSqrt2Pi = 0.39894228040143268f;  // 1/√(2π)
  static float f(float x) { return 0.5f * x * (1.f + erf_fast(x * kInvSqrt2)); }
  static float df(float x) {
    const float cdf = 0.5f * (1.f + erf_fast(x * kInvSqrt2));
    return cdf + x * kInvSqrt2Pi * exp_fast(-0.5f * x * x);
  }
};

// quick_gelu(x) = x·σ(1.702x);  d/dx = σ(1.702x) + 1.702·x·σ(1.702x)(1 − σ(1.702x))
struct QuickGeluFn {
  static float f(float x) { return x * sigmoid_fast(1.702f * x); }
  static float df(float x) {
    const float s = sigmoid_fast(1.702f * x);
    return s + 1.702f * x * s * (1.f - s);
  }
};

}  // namespace sima
