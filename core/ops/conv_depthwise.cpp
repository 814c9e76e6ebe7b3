// Depthwise conv2d (groups == Cin == Cout): one kh×kw filter per channel.
//
// im2col + GEMM would run C GEMMs of a single row each, so this is a direct loop:
//   y[b, c, oh, ow] = bias[c] + Σ_(i,j) w[c, 0, i, j] · x[b, c, oh·s − p + i, ow·s − p + j]
// For each tap (i, j) the valid output range is computed once (valid_range), so the
// inner loop runs over a contiguous output row with no bounds tests; with stride 1 it
// reads a contiguous input row too and vectorises.
// Backward, from the same sum:
//   dx[b, c, ih, iw] += w[c, i, j] · dy[b, c, oh, ow]   for ih = oh·s − p + i, iw = ow·s − p + j
//   dw[c, i, j]       = Σ_b Σ_(oh,ow) dy[b, c, oh, ow] · x[b, c, ih, iw]
//   db[c]             = Σ_b Σ_(oh,ow) dy[b, c, oh, ow]
#include <algorithm>

#include "core/autograd.h"
#include "core/ops/conv_kernels.h"
#include "core/parallel.h"

namespace sima {

namespace {

// x (B, C, H, W), w (C, 1, kh, kw), bias (C) or null -> y (B, C, Ho, Wo); one (b, c) plane per task.
void depthwise_forward_kernel(const float* x, const float* w, const float* bias, const ConvGeom& g, float* y) {
  const int64_t C = g.Cin, HWi = g.H * g.W, HWo = g.Ho * g.Wo, K = g.kh * g.kw, s = g.stride;
  parallel_for(g.B * C, grain_for(kGrainElementwise, HWo * K), [&](int64_t p0, int64_t p1) {
    for (int64_t pl = p0; pl < p1; ++pl) {
      const int64_t c = pl % C;
      const float* xp = x + pl * HWi;
      const float* wc = w + c * K;
      float* yp = y + pl * HWo;
      std::fill(yp, yp + HWo, bias ? bias[c] : 0.f);
      for (int64_t i = 0; i < g.kh; ++i)
        for (int64_t j = 0; j < g.kw; ++j) {
          const float wv = wc[i * g.kw + j];
          int64_t oh0, oh1, ow0, ow1;
          valid_range(i - g.pad, s, g.H, g.Ho, oh0, oh1);
          valid_range(j - g.pad, s, g.W, g.Wo, ow0, ow1);
          for (int64_t oh = oh0; oh < oh1; ++oh) {
            const float* xr = xp + (oh * s - g.pad + i) * g.W + j - g.pad;
            float* yr = yp + oh * g.Wo;
            if (s == 1)
              for (int64_t ow = ow0; ow < ow1; ++ow) yr[ow] += wv * xr[ow];
            else
              for (int64_t ow = ow0; ow < ow1; ++ow) yr[ow] += wv * xr[ow * s];
          }
        }
    }
  });
}

// Backward of depthwise_forward_kernel (docs/derivations.md §7, "Depthwise, NCHW"), from
// gy (B, C, Ho, Wo) into dx (B, C, H, W), dw (C, 1, kh, kw), db (C), all zeroed by the caller
// (null: not wanted). One channel per task: dw[c] and db[c] sum over the batch inside the task
// (in order of b, so the result does not depend on the thread count), and dx[b, c] is only
// written by channel c's task.
void depthwise_backward_kernel(const float* x, const float* w, const float* gy, const ConvGeom& g, float* dx,
                               float* dw, float* db) {
  const int64_t C = g.Cin, HWi = g.H * g.W, HWo = g.Ho * g.Wo, K = g.kh * g.kw, s = g.stride;
  parallel_for(C, grain_for(kGrainElementwise, g.B * HWo * K), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c)
      for (int64_t b = 0; b < g.B; ++b) {
        const int64_t pl = b * C + c;
        const float* gp = gy + pl * HWo;
        if (db) {
          float sum = 0.f;
          for (int64_t o = 0; o < HWo; ++o) sum += gp[o];
          db[c] += sum;
        }
        for (int64_t i = 0; i < g.kh; ++i)
          for (int64_t j = 0; j < g.kw; ++j) {
            int64_t oh0, oh1, ow0, ow1;
            valid_range(i - g.pad, s, g.H, g.Ho, oh0, oh1);
            valid_range(j - g.pad, s, g.W, g.Wo, ow0, ow1);
            const float wv = w[c * K + i * g.kw + j];
            float dwv = 0.f;
            for (int64_t oh = oh0; oh < oh1; ++oh) {
              const int64_t off = (oh * s - g.pad + i) * g.W + j - g.pad;
              const float* gr = gp + oh * g.Wo;
              if (dw) {
                const float* xr = x + pl * HWi + off;
                for (int64_t ow = ow0; ow < ow1; ++ow) dwv += gr[ow] * xr[ow * s];
              }
              if (dx) {
                float* dr = dx + pl * HWi + off;
                for (int64_t ow = ow0; ow < ow1; ++ow) dr[ow * s] += wv * gr[ow];
              }
            }
            if (dw) dw[c * K + i * g.kw + j] += dwv;
          }
      }
  });
}

}  // namespace

// x (B, C, H, W), weight (C, 1, kh, kw), bias (C) or undefined -> y (B, C, Ho, Wo)
Tensor conv2d_depthwise(const Tensor& x, const Tensor& w, const Tensor& bias, const ConvGeom& g) {
  Tensor y = empty(Shape{g.B, g.Cin, g.Ho, g.Wo});
  depthwise_forward_kernel(x.data(), w.data(), bias.defined() ? bias.data() : nullptr, g, y.data());
  if (needs_grad(x, w, bias))
    attach_grad_fn(y, "conv2d", {x, w, bias}, [xs = x.detach(), ws = w.detach(), g, rx = x.requires_grad(),
                                               rw = w.requires_grad(),
                                               rb = bias.defined() && bias.requires_grad()](
                                                  const Tensor& gy) -> Grads {
      // gy (B, C, Ho, Wo) -> dx (B, C, H, W), dw (C, 1, kh, kw), db (C)
      Tensor gx = rx ? zeros(xs.shape()) : Tensor(), gw = rw ? zeros(ws.shape()) : Tensor();
      Tensor gb = rb ? zeros(Shape{g.Cin}) : Tensor();
      depthwise_backward_kernel(xs.data(), ws.data(), gy.data(), g, rx ? gx.data() : nullptr,
                                rw ? gw.data() : nullptr, rb ? gb.data() : nullptr);
      return {gx, gw, gb};
    });
  return y;
}

}  // namespace sima
