// Depthwise conv2d over the heads of multi-head tokens: x (B, h, H·W, d) -> y (B, h, Ho·Wo, d).
//
// SOFT's DWConv of v (nn/attention/soft_gaussian.cpp) makes each head a channel of an H×W image and
// each of a head's d features a separate image that shares the head's k×k filter. The
// official code permutes v to (B·d, h, H, W), runs a depthwise conv2d and permutes back;
// here the d features stay innermost, so no permute is needed and for one tap and one output
// row the inner loop runs over (ow1 − ow0)·d contiguous floats (d = 16 in the study's models,
// where the NCHW kernel's rows are 7 floats). With stride 1 and p the padding:
//   y[b, c, oh·Wo + ow, e] = Σ_(i,j) w[c, 0, i, j] · x[b, c, (oh − p + i)·W + ow − p + j, e]
// Backward:
//   dx[b, c, ih·W + iw, e] += w[c, i, j] · dy[b, c, oh·Wo + ow, e]   (ih = oh − p + i, iw = ow − p + j)
//   dw[c, i, j]             = Σ_(b, e) Σ_(oh, ow) dy[b, c, oh·Wo + ow, e] · x[b, c, ih·W + iw, e]
// Every sum runs in the order of conv_depthwise.cpp on the permuted tensor (the taps in
// (i, j) order; dw over the images b·d + e in order, each image's (oh, ow) sum added whole),
// so y and dx equal the permute, conv2d, permute path bit for bit (tests/core/test_conv.cpp).
// dw agrees to the last bits only: GCC compiles that kernel's (oh, ow) sum as rounded products
// added in order (vmulps, then vaddss) and this one's as fused multiply-adds.
#include <algorithm>
#include <vector>

#include "core/autograd.h"
#include "core/ops/autocast.h"
#include "core/error.h"
#include "core/ops/conv.h"
#include "core/ops/conv_kernels.h"
#include "core/parallel.h"

namespace sima {

namespace {

// The sizes of one call: x (B, C, H·W, d), w (C, 1, kh, kw), padding p -> y (B, C, Ho·Wo, d).
struct HeadsGeom {
  int64_t B, C, d, H, W, Ho, Wo, kh, kw, p;
  int64_t K() const { return kh * kw; }
  int64_t HWi() const { return H * W * d; }    // floats per (b, c) plane of x
  int64_t HWo() const { return Ho * Wo * d; }  // floats per (b, c) plane of y
};

HeadsGeom heads_geometry(const Tensor& x, const Tensor& w, int64_t H, int64_t W, int padding) {
  check(x.dim() == 4 && w.dim() == 4 && w.size(0) == x.size(1) && w.size(1) == 1,
        "conv2d_depthwise_heads: x ", x.shape(), " must be (B, h, H·W, d) and weight ", w.shape(), " (h, 1, kh, kw)");
  check(H >= 1 && W >= 1 && x.size(2) == H * W, "conv2d_depthwise_heads: x ", x.shape(), " has not H·W = ", H,
        "·", W, " tokens");
  check(padding >= 0, "conv2d_depthwise_heads: padding must be >= 0");
  const int64_t kh = w.size(2), kw = w.size(3), p = padding;
  const HeadsGeom g{x.size(0), x.size(1), x.size(3), H, W, H + 2 * p - kh + 1, W + 2 * p - kw + 1, kh, kw, p};
  check(g.Ho >= 1 && g.Wo >= 1, "conv2d_depthwise_heads: kernel ", kh, "x", kw, " larger than the padded grid ",
        H, "x", W);
  return g;
}

// x (B, C, H·W, d), w (C, 1, kh, kw) -> y (B, C, Ho·Wo, d), zeroed by the caller. One (b, c)
// plane per task; for each tap, each valid output row is one flat axpy.
void heads_forward_kernel(const float* x, const float* w, const HeadsGeom& g, float* y) {
  const int64_t d = g.d, W = g.W, Wo = g.Wo, p = g.p, K = g.K(), HWi = g.HWi(), HWo = g.HWo();
  parallel_for(g.B * g.C, grain_for(kGrainElementwise, HWo * K), [&](int64_t p0, int64_t p1) {
    for (int64_t pl = p0; pl < p1; ++pl) {
      const float* xp = x + pl * HWi;
      float* yp = y + pl * HWo;
      for (int64_t i = 0; i < g.kh; ++i)
        for (int64_t j = 0; j < g.kw; ++j) {
          const float wv = w[(pl % g.C) * K + i * g.kw + j];
          int64_t oh0, oh1, ow0, ow1;
          valid_range(i - p, 1, g.H, g.Ho, oh0, oh1);
          valid_range(j - p, 1, W, Wo, ow0, ow1);
          const int64_t n = (ow1 - ow0) * d;
          for (int64_t oh = oh0; oh < oh1; ++oh) {
            const float* xr = xp + ((oh - p + i) * W + ow0 - p + j) * d;
            float* yr = yp + (oh * Wo + ow0) * d;
            for (int64_t t = 0; t < n; ++t) yr[t] += wv * xr[t];
          }
        }
    }
  });
}

// Backward of heads_forward_kernel (docs/derivations.md §7, "Depthwise over the heads"), from
// gy (B, C, Ho·Wo, d) into dx (B, C, H·W, d) and dw (C, 1, kh, kw), zeroed by the caller (null:
// not wanted). One head per task, as conv_depthwise.cpp: dw[c] sums over the batch inside the
// task, in order, and dx[b, c] is only written by head c's task.
void heads_backward_kernel(const float* x, const float* w, const float* gy, const HeadsGeom& g, float* dx,
                           float* dw) {
  const int64_t d = g.d, W = g.W, Wo = g.Wo, p = g.p, K = g.K(), HWi = g.HWi(), HWo = g.HWo();
  parallel_for(g.C, grain_for(kGrainElementwise, g.B * HWo * K), [&](int64_t c0, int64_t c1) {
    std::vector<float> part(static_cast<size_t>(d));  // one (oh, ow) sum per feature e
    for (int64_t c = c0; c < c1; ++c)
      for (int64_t b = 0; b < g.B; ++b) {
        const int64_t pl = b * g.C + c;
        const float* gp = gy + pl * HWo;
        for (int64_t i = 0; i < g.kh; ++i)
          for (int64_t j = 0; j < g.kw; ++j) {
            int64_t oh0, oh1, ow0, ow1;
            valid_range(i - p, 1, g.H, g.Ho, oh0, oh1);
            valid_range(j - p, 1, W, Wo, ow0, ow1);
            const float wv = w[c * K + i * g.kw + j];
            const int64_t n = (ow1 - ow0) * d;
            std::fill(part.begin(), part.end(), 0.f);
            for (int64_t oh = oh0; oh < oh1; ++oh) {
              const int64_t at = ((oh - p + i) * W + ow0 - p + j) * d;
              const float* gr = gp + (oh * Wo + ow0) * d;
              if (dw) {
                const float* xr = x + pl * HWi + at;
                for (int64_t ow = 0; ow < ow1 - ow0; ++ow)
                  for (int64_t e = 0; e < d; ++e) part[size_t(e)] += gr[ow * d + e] * xr[ow * d + e];
              }
              if (dx) {
                float* dr = dx + pl * HWi + at;
                for (int64_t t = 0; t < n; ++t) dr[t] += wv * gr[t];
              }
            }
            if (dw) {
              float* dwt = dw + c * K + i * g.kw + j;
              for (int64_t e = 0; e < d; ++e) *dwt += part[size_t(e)];
            }
          }
      }
  });
}

// The convolution in float32 (the public function adds float16's rounding under autocast).
Tensor depthwise_heads_f32(const Tensor& x, const Tensor& w, int64_t H, int64_t W, int padding) {
  const HeadsGeom g = heads_geometry(x, w, H, W, padding);
  Tensor y = zeros(Shape{g.B, g.C, g.Ho * g.Wo, g.d});
  heads_forward_kernel(x.data(), w.data(), g, y.data());
  if (needs_grad(x, w))
    attach_grad_fn(y, "conv2d_depthwise_heads", {x, w},
                   [xs = x.detach(), ws = w.detach(), g, rx = x.requires_grad(),
                    rw = w.requires_grad()](const Tensor& gy) -> Grads {
      // gy (B, h, Ho·Wo, d) -> dx (B, h, H·W, d), dw (h, 1, kh, kw)
      Tensor gx = rx ? zeros(xs.shape()) : Tensor(), gw = rw ? zeros(ws.shape()) : Tensor();
      heads_backward_kernel(xs.data(), ws.data(), gy.data(), g, rx ? gx.data() : nullptr, rw ? gw.data() : nullptr);
      return {gx, gw};
    });
  return y;
}

}  // namespace

Tensor conv2d_depthwise_heads(const Tensor& x, const Tensor& w, int64_t H, int64_t W, int padding) {
  if (autocast_mode() == AutocastMode::FP16)  // CUDA's float16 conv: inputs and output in float16
    return fp16_round(depthwise_heads_f32(fp16_round(x), fp16_round(w), H, W, padding));
  return depthwise_heads_f32(x, w, H, W, padding);
}

}  // namespace sima
