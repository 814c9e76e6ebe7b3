// Loop templates behind the elementwise ops and activations (internal header).
//
// unary_op:  y = f(x);            backward gx = gy · df(x, y)
// binary_op: y = f(a, b) with broadcasting; the op's backward is written by hand
//            next to it (see elementwise.cpp).
// The functors are plain lambdas, inlined into the loops so the compiler
// vectorises them; loops split across threads above a grain size.
#pragma once
#include <algorithm>

#include "core/autograd.h"
#include "core/ops/broadcast.h"
#include "core/parallel.h"

namespace sima {

// out[i] = f(x[i]) over n contiguous floats.
template <class F>
void map1(const float* x, float* out, int64_t n, int64_t grain, F f) {
  parallel_for(n, grain, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) out[i] = f(x[i]);
  });
}

// out[i] = f(a[i], b[i]) over n contiguous floats.
template <class F>
void map2(const float* a, const float* b, float* out, int64_t n, int64_t grain, F f) {
  parallel_for(n, grain, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) out[i] = f(a[i], b[i]);
  });
}

// y = f(x); dL/dx = dL/dy · df(x, y). Saves x and y (views, no copy) for the backward.
template <class F, class DF>
Tensor unary_op(const char* name, const Tensor& x, F f, DF df,
                int64_t grain = kGrainTranscendental) {
  Tensor y = empty(x.shape());
  map1(x.data(), y.data(), x.numel(), grain, f);
  if (needs_grad(x)) {
    attach_grad_fn(y, name, {x}, [xs = x.detach(), ys = y.detach(), df, grain](const Tensor& gy) -> Grads {
      Tensor gx = empty(xs.shape());
      const float *px = xs.data(), *py = ys.data(), *pg = gy.data();
      float* po = gx.data();
      parallel_for(xs.numel(), grain, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) po[i] = pg[i] * df(px[i], py[i]);
      });
      return {gx};
    });
  }
  return y;
}

// out = f(a, b) with numpy broadcasting (no autograd: the caller attaches its backward).
template <class F>
Tensor broadcast_map2(const char* name, const Tensor& a, const Tensor& b, F f,
                      int64_t grain = kGrainElementwise) {
  Shape out_shape = a.shape() == b.shape() ? a.shape() : broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = empty(out_shape);
  const float *pa = a.data(), *pb = b.data();
  float* po = out.data();
  if (a.shape() == b.shape()) {  // the common case: one flat loop
    map2(pa, pb, po, out.numel(), grain, f);
    return out;
  }
  BroadcastPlan p = make_broadcast_plan(out_shape, a.shape(), b.shape());
  int64_t inner = p.inner, sa = p.stride_a[p.ndim - 1], sb = p.stride_b[p.ndim - 1];
  parallel_for(p.rows, std::max<int64_t>(1, grain / std::max<int64_t>(1, inner)),
               [&](int64_t r0, int64_t r1) {
                 for (int64_t r = r0; r < r1; ++r) {
                   int64_t oa, ob;
                   p.row_offsets(r, oa, ob);
                   const float *ra = pa + oa, *rb = pb + ob;
                   float* ro = po + r * inner;
                   if (sa && sb)
                     for (int64_t i = 0; i < inner; ++i) ro[i] = f(ra[i], rb[i]);
                   else if (sa) {
                     float bv = rb[0];
                     for (int64_t i = 0; i < inner; ++i) ro[i] = f(ra[i], bv);
                   } else if (sb) {
                     float av = ra[0];
                     for (int64_t i = 0; i < inner; ++i) ro[i] = f(av, rb[i]);
                   } else {
                     float v = f(ra[0], rb[0]);
                     for (int64_t i = 0; i < inner; ++i) ro[i] = v;
                   }
                 }
               });
  return out;
}

}  // namespace sima
