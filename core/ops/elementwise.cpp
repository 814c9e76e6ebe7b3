// Elementwise ops. Each forward is one loop; each backward is written right
// under it. For broadcasting binary ops the backward computes the gradient at
// the output's shape and sums it down to each input's shape (sum_to), because
// an input element broadcast to k outputs receives the sum of their gradients.
#include "core/ops/elementwise.h"

#include <cmath>

#include "core/error.h"
#include "core/ops/elementwise_kernels.h"
#include "core/ops/vmath.h"

namespace sima {

// ---- add / sub --------------------------------------------------------------
// y = a + b:  ga = sum_to(gy),  gb = sum_to(gy)
Tensor add(const Tensor& a, const Tensor& b) {
  Tensor y = broadcast_map2("add", a, b, [](float u, float v) { return u + v; });
  if (needs_grad(a, b))
    attach_grad_fn(y, "add", {a, b}, [sa = a.shape(), sb = b.shape(), ra = a.requires_grad(),
                                      rb = b.requires_grad()](const Tensor& g) -> Grads {
      return {ra ? sum_to(g, sa) : Tensor(), rb ? sum_to(g, sb) : Tensor()};
    });
  return y;
}

// y = a - b:  ga = sum_to(gy),  gb = -sum_to(gy)
Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor y = broadcast_map2("sub", a, b, [](float u, float v) { return u - v; });
  if (needs_grad(a, b))
    attach_grad_fn(y, "sub", {a, b}, [sa = a.shape(), sb = b.shape(), ra = a.requires_grad(),
                                      rb = b.requires_grad()](const Tensor& g) -> Grads {
      return {ra ? sum_to(g, sa) : Tensor(), rb ? neg(sum_to(g, sb)) : Tensor()};
    });
  return y;
}

// ---- mul / div --------------------------------------------------------------
// y = a·b:  ga = sum_to(gy·b),  gb = sum_to(gy·a)
Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor y = broadcast_map2("mul", a, b, [](float u, float v) { return u * v; });
  if (needs_grad(a, b))
    attach_grad_fn(y, "mul", {a, b}, [as = a.detach(), bs = b.detach(), ra = a.requires_grad(),
                                      rb = b.requires_grad()](const Tensor& g) -> Grads {
      return {ra ? sum_to(mul(g, bs), as.shape()) : Tensor(),
              rb ? sum_to(mul(g, as), bs.shape()) : Tensor()};
    });
  return y;
}

// y = a / b:  ga = sum_to(gy / b),  gb = sum_to(-gy·a/b²) = sum_to(-gy·y/b)
Tensor div(const Tensor& a, const Tensor& b) {
  Tensor y = broadcast_map2("div", a, b, [](float u, float v) { return u / v; });
  if (needs_grad(a, b))
    attach_grad_fn(y, "div", {a, b}, [as = a.detach(), bs = b.detach(), ys = y.detach(),
                                      ra = a.requires_grad(),
                                      rb = b.requires_grad()](const Tensor& g) -> Grads {
      Tensor ga, gb;
      if (ra) ga = sum_to(div(g, bs), as.shape());
      if (rb) gb = sum_to(broadcast_map2("div", mul(g, ys), bs, [](float u, float v) { return -u / v; }),
                          bs.shape());
      return {ga, gb};
    });
  return y;
}

// y = a^b:  ga = sum_to(gy·b·a^(b-1)),  gb = sum_to(gy·y·ln a)
Tensor pow(const Tensor& a, const Tensor& b) {
  Tensor y = broadcast_map2("pow", a, b, [](float u, float v) { return std::pow(u, v); },
                            kGrainTranscendental);
  if (needs_grad(a, b))
    attach_grad_fn(y, "pow", {a, b}, [as = a.detach(), bs = b.detach(), ys = y.detach(),
                                      ra = a.requires_grad(),
                                      rb = b.requires_grad()](const Tensor& g) -> Grads {
      Tensor ga, gb;
      if (ra) {
        Tensor d = broadcast_map2("pow", as, bs, [](float u, float v) {
          return v == 0.f ? 0.f : v * std::pow(u, v - 1.f);
        });
        ga = sum_to(mul(g, d), as.shape());
      }
      if (rb) {
        Tensor gy = mul(g, ys);  // output shape
        Tensor lg = broadcast_map2("pow", gy, as, [](float u, float v) {
          return u == 0.f ? 0.f : u * std::log(v);  // 0·ln 0 taken as 0
        });
        gb = sum_to(lg, bs.shape());
      }
      return {ga, gb};
    });
  return y;
}

// ---- with a scalar ----------------------------------------------------------
Tensor add(const Tensor& x, float s) {
  return unary_op("add", x, [s](float v) { return v + s; }, [](float, float) { return 1.f; },
                  kGrainElementwise);
}
Tensor sub(const Tensor& x, float s) { return add(x, -s); }
Tensor rsub(const Tensor& x, float s) {
  return unary_op("rsub", x, [s](float v) { return s - v; }, [](float, float) { return -1.f; },
                  kGrainElementwise);
}
Tensor mul(const Tensor& x, float s) {
  return unary_op("mul", x, [s](float v) { return v * s; }, [s](float, float) { return s; },
                  kGrainElementwise);
}
Tensor div(const Tensor& x, float s) {
  return unary_op("div", x, [s](float v) { return v / s; }, [s](float, float) { return 1.f / s; },
                  kGrainElementwise);
}
// y = x^p: dy/dx = p·x^(p-1) (0 when p = 0)
Tensor pow(const Tensor& x, float p) {
  return unary_op("pow", x, [p](float v) { return std::pow(v, p); },
                  [p](float v, float) { return p == 0.f ? 0.f : p * std::pow(v, p - 1.f); });
}

// ---- unary ------------------------------------------------------------------
Tensor neg(const Tensor& x) {
  return unary_op("neg", x, [](float v) { return -v; }, [](float, float) { return -1.f; },
                  kGrainElementwise);
}
// d e^x = e^x = y
Tensor exp(const Tensor& x) {
  return unary_op("exp", x, [](float v) { return exp_fast(v); }, [](float, float y) { return y; });
}
// d ln x = 1/x
Tensor log(const Tensor& x) {
  return unary_op("log", x, [](float v) { return std::log(v); }, [](float v, float) { return 1.f / v; });
}
// d √x = 1/(2√x) = 1/(2y)
Tensor sqrt(const Tensor& x) {
  return unary_op("sqrt", x, [](float v) { return std::sqrt(v); },
                  [](float, float y) { return 0.5f / y; });
}
// d x^(-1/2) = -x^(-3/2)/2 = -y³/2
Tensor rsqrt(const Tensor& x) {
  return unary_op("rsqrt", x, [](float v) { return 1.f / std::sqrt(v); },
                  [](float, float y) { return -0.5f * y * y * y; });
}
Tensor abs(const Tensor& x) {
  return unary_op("abs", x, [](float v) { return std::fabs(v); },
                  [](float v, float) { return float((v > 0.f) - (v < 0.f)); }, kGrainElementwise);
}
Tensor sign(const Tensor& x) {
  return unary_op("sign", x, [](float v) { return float((v > 0.f) - (v < 0.f)); },
                  [](float, float) { return 0.f; }, kGrainElementwise);
}
Tensor square(const Tensor& x) {
  return unary_op("square", x, [](float v) { return v * v; }, [](float v, float) { return 2.f * v; },
                  kGrainElementwise);
}
Tensor clamp(const Tensor& x, float lo, float hi) {
  check(!(lo > hi), "clamp: min ", lo, " is greater than max ", hi);
  return unary_op("clamp", x, [lo, hi](float v) { return v < lo ? lo : (v > hi ? hi : v); }  /* NaN stays NaN */,
                  [lo, hi](float v, float) { return float(v >= lo && v <= hi); }, kGrainElementwise);
}
Tensor clamp_min(const Tensor& x, float lo) { return clamp(x, lo, INFINITY); }
Tensor clamp_max(const Tensor& x, float hi) { return clamp(x, -INFINITY, hi); }

}  // namespace sima
