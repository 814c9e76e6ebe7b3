// fused_mlp: forward and hand-derived backward (see fused_mlp.h for why it exists).
//
// x viewed as (R, in). Forward:
//   h = x W1ᵀ + b1          (R×H)   saved
//   a = act(h)              (R×H)   freed at the end of the forward
//   y = a W2ᵀ + b2          (R×out)
// Backward, from gy = dL/dy (R×out):
//   a   = act(h), g = act'(h)   recomputed in one pass (GELU: one erf for both)
//   dW2 = gyᵀ a   (out×H),  db2 = Σ_rows gy
//   da  = gy W2   (R×H)     written over a (a is not needed after dW2)
//   dh  = da ⊙ g            in place
//   dW1 = dhᵀ x   (H×in),   db1 = Σ_rows dh,   dx = dh W1   (R×in)
#include "core/ops/fused_mlp.h"

#include <algorithm>
#include <string>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops/activation_fns.h"
#include "core/ops/gemm.h"
#include "core/ops/linear_kernels.h"
#include "core/parallel.h"

namespace sima {

bool parse_mlp_activation(const std::string& name, MlpActivation* out) {
  if (name == "gelu") *out = MlpActivation::Gelu;
  else if (name == "quick_gelu") *out = MlpActivation::QuickGelu;
  else if (name == "relu") *out = MlpActivation::Relu;
  else return false;
  return true;
}

namespace {

// Rows split across threads, ~kGrainTranscendental activations per thread at least.
int64_t row_grain(int64_t H) { return grain_for(kGrainTranscendental, H); }

// h (R×H) += b1 per row, a = act(h). a may be h itself (inference: h is not kept).
template <class Fn>
void bias_act(float* h, const float* b1, float* a, int64_t R, int64_t H) {
  parallel_for(R, row_grain(H), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float *hr = h + r * H, *ar = a + r * H;
      for (int64_t j = 0; j < H; ++j) {
        const float v = hr[j] + b1[j];
        hr[j] = v;
        ar[j] = Fn::f(v);
      }
    }
  });
}

// a = act(h) and g = act'(h) (n each), one pass sharing the transcendental work.
template <class Fn>
void act_and_grad(const float* h, float* a, float* g, int64_t n) {
  parallel_for(n, kGrainTranscendental, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) a[i] = Fn::f_df(h[i], g[i]);
  });
}

template <class Fn>
void act_only(const float* h, float* a, int64_t n) {
  parallel_for(n, kGrainTranscendental, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) a[i] = Fn::f(h[i]);
  });
}

// d (n) *= g (n), in place: da -> dh.
void times(float* d, const float* g, int64_t n) {
  parallel_for(n, kGrainElementwise, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) d[i] *= g[i];
  });
}

// d (n) *= act'(h), in place: da -> dh.
template <class Fn>
void times_act_grad(float* d, const float* h, int64_t n) {
  parallel_for(n, kGrainTranscendental, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) d[i] *= Fn::df(h[i]);
  });
}

template <class Fn>
Tensor fused_mlp_impl(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2,
                      const Tensor& b2) {
  const int64_t in = w1.size(1), H = w1.size(0), out = w2.size(0);
  const int64_t R = prod(x.shape(), 0, x.dim() - 1);
  const bool grad = needs_grad(x, w1, b1, w2, b2);

  // Under bf16 autocast x, W1, W2 and a are rounded once and kept for the backward (gemm.h).
  const Bf16Operand x16(x.data(), R * in), w1_16(w1.data(), H * in), w2_16(w2.data(), out * H);
  Tensor h = empty({R, H});
  gemm(false, true, R, H, in, x.data(), x16, w1.data(), w1_16, 0.f, h.data());  // h = x W1ᵀ
  Tensor a = grad ? empty({R, H}) : h;  // without autograd the activation overwrites h
  bias_act<Fn>(h.data(), b1.data(), a.data(), R, H);
  const Bf16Operand a16(a.data(), R * H);
  Shape ys = x.shape();
  ys[ys.ndim() - 1] = out;
  Tensor y = empty(ys);
  linear_rows(a.data(), w2.data(), b2.data(), y.data(), R, out, H, a16, w2_16);
  if (!grad) return y;

  attach_grad_fn(y, "fused_mlp", {x, w1, b1, w2, b2},
                 [xs = x.detach(), w1s = w1.detach(), w2s = w2.detach(), h, x16, w1_16, w2_16, a16, R, in, H, out,
                  rx = x.requires_grad(), rw1 = w1.requires_grad(), rb1 = b1.requires_grad(),
                  rw2 = w2.requires_grad(), rb2 = b2.requires_grad()](const Tensor& gy) -> Grads {
    Tensor gx, gw1, gb1, gw2, gb2;
    Tensor s = empty({R, H});  // a, then da, then dh
    const bool rin = rx || rw1 || rb1;
    const Bf16Operand gy16 = rw2 && rin ? Bf16Operand(gy.data(), R * out) : Bf16Operand();  // read twice
    Tensor g = rw2 && rin ? empty({R, H}) : Tensor();  // act'(h), from the pass that makes a
    if (rw2) {
      if (rin) act_and_grad<Fn>(h.data(), s.data(), g.data(), R * H);         // a = act(h), g = act'(h)
      else act_only<Fn>(h.data(), s.data(), R * H);                            // a = act(h)
      gw2 = empty(w2s.shape());
      gemm(true, false, out, H, R, gy.data(), gy16, s.data(), a16, 0.f, gw2.data());  // dW2 = gyᵀ a
    }
    if (rb2) gb2 = bias_grad(gy.data(), R, out);
    if (rin) {
      gemm(false, false, R, H, out, gy.data(), gy16, w2s.data(), w2_16, 0.f, s.data());  // da = gy W2
      if (g.defined()) times(s.data(), g.data(), R * H);                     // dh = da ⊙ g
      else times_act_grad<Fn>(s.data(), h.data(), R * H);                   // dh = da ⊙ act'(h)
      const Bf16Operand dh16 = rw1 && rx ? Bf16Operand(s.data(), R * H) : Bf16Operand();  // read twice
      if (rw1) {
        gw1 = empty(w1s.shape());
        gemm(true, false, H, in, R, s.data(), dh16, xs.data(), x16, 0.f, gw1.data());  // dW1 = dhᵀ x
      }
      if (rb1) gb1 = bias_grad(s.data(), R, H);
      if (rx) {
        gx = empty(xs.shape());
        gemm(false, false, R, in, H, s.data(), dh16, w1s.data(), w1_16, 0.f, gx.data());  // dx = dh W1
      }
    }
    return {gx, gw1, gb1, gw2, gb2};
  });
  return y;
}

}  // namespace

Tensor fused_mlp(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2,
                 const Tensor& b2, MlpActivation act) {
  check(x.defined() && w1.defined() && b1.defined() && w2.defined() && b2.defined(),
        "fused_mlp: undefined input, weight or bias");
  check(x.dim() >= 1 && w1.dim() == 2 && w2.dim() == 2 && b1.dim() == 1 && b2.dim() == 1,
        "fused_mlp: need x (..., in), w1 (H, in), b1 (H), w2 (out, H), b2 (out); got x ", x.shape(),
        ", w1 ", w1.shape(), ", b1 ", b1.shape(), ", w2 ", w2.shape(), ", b2 ", b2.shape());
  check(x.size(-1) == w1.size(1) && b1.size(0) == w1.size(0) && w2.size(1) == w1.size(0) &&
            b2.size(0) == w2.size(0),
        "fused_mlp: shapes do not chain: x ", x.shape(), ", w1 ", w1.shape(), ", b1 ", b1.shape(),
        ", w2 ", w2.shape(), ", b2 ", b2.shape());
  switch (act) {
    case MlpActivation::Gelu: return fused_mlp_impl<GeluFn>(x, w1, b1, w2, b2);
    case MlpActivation::QuickGelu: return fused_mlp_impl<QuickGeluFn>(x, w1, b1, w2, b2);
    case MlpActivation::Relu: return fused_mlp_impl<ReluFn>(x, w1, b1, w2, b2);
  }
  fail("fused_mlp: unknown activation");
}

}  // namespace sima
