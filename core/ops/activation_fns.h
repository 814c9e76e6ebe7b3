// The scalar activation functions and their derivatives, shared by the elementwise
// activation ops (activation.cpp), the fused MLP (fused_mlp.cpp) and ReLU attention's
// score functions (nn/attention/relu_attention.cpp), which apply them in their own loops.
// Each is a struct with
//   f(x)  the activation,   df(x)  its derivative at x,
//   f_df(x, dy)  both at once, sharing the transcendental work (the same values as f, df)
// inlined into the callers' loops so the compiler vectorises them.
#pragma once
#include <cmath>

#include "core/ops/vmath.h"

namespace sima {

// f_df for the functions whose f and df share nothing.
template <class Fn>
struct Separate {
  static float f_df(float x, float& dy) {
    dy = Fn::df(x);
    return Fn::f(x);
  }
};

struct ReluFn : Separate<ReluFn> {  // relu' = 1 where x > 0 (0 at 0, as PyTorch)
  static float f(float x) { return x > 0.f ? x : 0.f; }
  static float df(float x) { return x > 0.f ? 1.f : 0.f; }
};

// relu²(x) = relu(x)²;  d/dx = 2·relu(x)
struct Relu2Fn : Separate<Relu2Fn> {
  static float f(float x) { return x > 0.f ? x * x : 0.f; }
  static float df(float x) { return x > 0.f ? 2.f * x : 0.f; }
};

// relu6(x) = min(max(x, 0), 6);  d/dx = 1 on (0, 6)
struct Relu6Fn : Separate<Relu6Fn> {
  static float f(float x) { return x < 0.f ? 0.f : (x > 6.f ? 6.f : x); }
  static float df(float x) { return x > 0.f && x < 6.f ? 1.f : 0.f; }
};

struct IdentityFn : Separate<IdentityFn> {
  static float f(float x) { return x; }
  static float df(float) { return 1.f; }
};

// softplus(x) = log(1 + eˣ), = x above the threshold 20 (PyTorch's β = 1 defaults);
// d/dx = σ(x), 1 above the threshold
struct SoftplusFn : Separate<SoftplusFn> {
  static constexpr float kThreshold = 20.f;
  static float f(float x) { return x > kThreshold ? x : std::log1p(std::exp(x)); }
  static float df(float x) { return x > kThreshold ? 1.f : sigmoid_fast(x); }
};

// σ(x) = 1/(1 + e^−x);  σ' = σ(1 − σ)
struct SigmoidFn {
  static float f(float x) { return sigmoid_fast(x); }
  static float df(float x) {
    const float s = sigmoid_fast(x);
    return s * (1.f - s);
  }
  static float f_df(float x, float& dy) {
    const float y = sigmoid_fast(x);
    dy = y * (1.f - y);
    return y;
  }
};

// gelu(x) = x·Φ(x), Φ(x) = (1 + erf(x/√2))/2
// gelu'(x) = Φ(x) + x·φ(x), φ(x) = e^(−x²/2)/√(2π)
struct GeluFn {
  static constexpr float kInvSqrt2 = 0.70710678118654752f;    // 1/√2
  static constexpr float kInvSqrt2Pi = 0.39894228040143268f;  // 1/√(2π)
  static float f(float x) { return 0.5f * x * (1.f + erf_fast(x * kInvSqrt2)); }
  // erf_fast(x/√2) also gives e^(−x²/2), φ's exponential: one exp for both terms
  static float df(float x) {
    float gauss;
    const float cdf = 0.5f * (1.f + erf_fast(x * kInvSqrt2, gauss));
    return cdf + x * kInvSqrt2Pi * gauss;
  }
  static float f_df(float x, float& dy) {  // y = x·Φ(x): may differ from f(x) in the last bit
    float gauss;
    const float cdf = 0.5f * (1.f + erf_fast(x * kInvSqrt2, gauss));
    dy = cdf + x * kInvSqrt2Pi * gauss;
    return x * cdf;
  }
};

// quick_gelu(x) = x·σ(1.702x);  d/dx = σ(1.702x) + 1.702·x·σ(1.702x)(1 − σ(1.702x))
struct QuickGeluFn : Separate<QuickGeluFn> {
  static float f(float x) { return x * sigmoid_fast(1.702f * x); }
  static float df(float x) {
    const float s = sigmoid_fast(1.702f * x);
    return s + 1.702f * x * s * (1.f - s);
  }
};

}  // namespace sima
