// Elementwise math with numpy-style broadcasting (PyTorch names and semantics).
#pragma once
#include "core/tensor.h"

namespace sima {

// Binary, broadcasting: out shape = broadcast(a.shape, b.shape).
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);  // a^b, a > 0 where b is not an integer

// With a scalar.
Tensor add(const Tensor& x, float s);
Tensor sub(const Tensor& x, float s);
Tensor rsub(const Tensor& x, float s);  // s - x
Tensor mul(const Tensor& x, float s);
Tensor div(const Tensor& x, float s);
Tensor pow(const Tensor& x, float p);

// Unary.
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);  // 1 / sqrt(x)
Tensor abs(const Tensor& x);    // gradient sign(x), 0 at 0
Tensor sign(const Tensor& x);   // -1, 0, 1; gradient 0
Tensor square(const Tensor& x);
// Clamp to [lo, hi]; the gradient passes where lo <= x <= hi (as PyTorch).
Tensor clamp(const Tensor& x, float lo, float hi);
Tensor clamp_min(const Tensor& x, float lo);
Tensor clamp_max(const Tensor& x, float hi);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& x) { return neg(x); }
inline Tensor operator+(const Tensor& x, float s) { return add(x, s); }
inline Tensor operator-(const Tensor& x, float s) { return sub(x, s); }
inline Tensor operator*(const Tensor& x, float s) { return mul(x, s); }
inline Tensor operator/(const Tensor& x, float s) { return div(x, s); }
inline Tensor operator+(float s, const Tensor& x) { return add(x, s); }
inline Tensor operator-(float s, const Tensor& x) { return rsub(x, s); }
inline Tensor operator*(float s, const Tensor& x) { return mul(x, s); }

}  // namespace sima
