// Depthwise conv2d on channels-last tensors: x (B, H, W, C) -> y (B, Ho, Wo, C).
//
// A transformer's tokens (B, N, C) are already a channels-last grid (B, H, W, C), so a
// depthwise conv over them (CvT's q/k/v projections) needs no permute to NCHW and back.
// And the inner loop runs over the C contiguous channels of one pixel, which vectorises
// even when the grid is tiny (CvT on 28×28 images works on 14×14 down to 2×2 grids, where
// the NCHW kernel's rows are 2–14 floats long). Same sums as conv_depthwise.cpp:
//   y[b, oh, ow, c] = bias[c] + Σ_(i,j) w[c, 0, i, j] · x[b, oh·s − p + i, ow·s − p + j, c]
// Backward:
//   dx[b, ih, iw, c] += w[c, i, j] · dy[b, oh, ow, c]   (ih = oh·s − p + i, iw = ow·s − p + j)
//   dw[c, i, j]       = Σ_(b, oh, ow) dy[b, oh, ow, c] · x[b, ih, iw, c]
//   db[c]             = Σ_(b, oh, ow) dy[b, oh, ow, c]
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

// w (C, 1, kh, kw) -> (kh·kw, C): one contiguous row of C weights per tap.
std::vector<float> taps_by_channel(const Tensor& w, int64_t C, int64_t K) {
  std::vector<float> t(size_t(K * C));
  const float* pw = w.data();
  for (int64_t c = 0; c < C; ++c)
    for (int64_t k = 0; k < K; ++k) t[size_t(k * C + c)] = pw[c * K + k];
  return t;
}

// The geometry of one call, x (B, H, W, C), w (C, 1, kh, kw), once the shapes are checked.
ConvGeom channels_last_geometry(const Tensor& x, const Tensor& w, const Tensor& bias, int stride, int padding) {
  check(x.dim() == 4 && w.dim() == 4 && w.size(0) == x.size(3) && w.size(1) == 1,
        "conv2d_depthwise_channels_last: x ", x.shape(), " must be (B, H, W, C) and weight ", w.shape(),
        " (C, 1, kh, kw)");
  check(!bias.defined() || (bias.dim() == 1 && bias.size(0) == x.size(3)),
        "conv2d_depthwise_channels_last: bias must be (C)");
  check(stride >= 1 && padding >= 0, "conv2d_depthwise_channels_last: stride must be >= 1 and padding >= 0");
  const int64_t H = x.size(1), W = x.size(2), C = x.size(3), kh = w.size(2), kw = w.size(3);
  const int64_t Ho = (H + 2 * padding - kh) / stride + 1, Wo = (W + 2 * padding - kw) / stride + 1;
  check(Ho >= 1 && Wo >= 1, "conv2d_depthwise_channels_last: kernel ", kh, "x", kw, " larger than the padded input ",
        H, "x", W);
  return ConvGeom{x.size(0), C, H, W, C, kh, kw, Ho, Wo, stride, padding, C};
}

// Calls f(ih, iw, tap) for every tap (i, j) of output pixel (oh, ow) that falls inside the H×W
// input, tap = i·kw + j: the taps on the padding are skipped.
template <class F>
void for_each_tap(const ConvGeom& g, int64_t oh, int64_t ow, F&& f) {
  for (int64_t i = 0; i < g.kh; ++i) {
    const int64_t ih = oh * g.stride - g.pad + i;
    if (ih < 0 || ih >= g.H) continue;
    for (int64_t j = 0; j < g.kw; ++j) {
      const int64_t iw = ow * g.stride - g.pad + j;
      if (iw < 0 || iw >= g.W) continue;
      f(ih, iw, i * g.kw + j);
    }
  }
}

// x (B, H, W, C), wt (kh·kw, C), bias (C) or null -> y (B, Ho, Wo, C). One output row (b, oh) per task.
void channels_last_forward_kernel(const float* x, const float* wt, const float* bias, const ConvGeom& g, float* y) {
  const int64_t H = g.H, W = g.W, C = g.Cin, Ho = g.Ho, Wo = g.Wo;
  parallel_for(g.B * Ho, grain_for(kGrainElementwise, Wo * g.kh * g.kw * C), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / Ho, oh = r % Ho;
      for (int64_t ow = 0; ow < Wo; ++ow) {
        float* yp = y + (r * Wo + ow) * C;
        if (bias) std::copy(bias, bias + C, yp);
        else std::fill(yp, yp + C, 0.f);
        for_each_tap(g, oh, ow, [&](int64_t ih, int64_t iw, int64_t tap) {
          const float* xp = x + ((b * H + ih) * W + iw) * C;
          const float* wp = wt + tap * C;
          for (int64_t c = 0; c < C; ++c) yp[c] += wp[c] * xp[c];
        });
      }
    }
  });
}

// Backward of channels_last_forward_kernel (docs/derivations.md §7, "Depthwise, channels last"),
// from gy (B, Ho, Wo, C): dx (B, H, W, C), zeroed by the caller, or null; returns dw (kh·kw, C)
// then db (C), one vector. The batch is cut into fixed blocks of kBlock images, one task each: a
// block writes dx for its own images and sums its share of dw and db into its own slot; the slots
// are added in block order after. The blocks do not depend on the thread count, so neither does
// the result; the inner loops run over all C channels.
std::vector<float> channels_last_backward_kernel(const float* x, const float* wt, const float* gy,
                                                 const ConvGeom& g, float* dx, bool want_dw) {
  const int64_t H = g.H, W = g.W, C = g.Cin, Ho = g.Ho, Wo = g.Wo, K = g.kh * g.kw;
  constexpr int64_t kBlock = 4;
  const int64_t nblk = (g.B + kBlock - 1) / kBlock;
  std::vector<float> part(size_t(nblk * (K + 1) * C), 0.f);  // per block: dw (K, C), then db (C)
  parallel_for(nblk, 1, [&](int64_t k0, int64_t k1) {
    for (int64_t blk = k0; blk < k1; ++blk) {
      float *dwt = part.data() + blk * (K + 1) * C, *db = dwt + K * C;
      for (int64_t b = blk * kBlock; b < std::min(g.B, (blk + 1) * kBlock); ++b)
        for (int64_t oh = 0; oh < Ho; ++oh)
          for (int64_t ow = 0; ow < Wo; ++ow) {
            const float* gp = gy + ((b * Ho + oh) * Wo + ow) * C;
            for (int64_t c = 0; c < C; ++c) db[c] += gp[c];
            for_each_tap(g, oh, ow, [&](int64_t ih, int64_t iw, int64_t tap) {
              const int64_t at = ((b * H + ih) * W + iw) * C;
              if (want_dw) {
                const float* xp = x + at;
                float* dw = dwt + tap * C;
                for (int64_t c = 0; c < C; ++c) dw[c] += gp[c] * xp[c];
              }
              if (dx) {
                const float* wp = wt + tap * C;
                float* dxp = dx + at;
                for (int64_t c = 0; c < C; ++c) dxp[c] += wp[c] * gp[c];
              }
            });
          }
    }
  });
  for (int64_t blk = 1; blk < nblk; ++blk) {  // slot 0 += slots 1.. in order
    const float* src = part.data() + blk * (K + 1) * C;
    for (int64_t i = 0; i < (K + 1) * C; ++i) part[size_t(i)] += src[i];
  }
  part.resize(size_t((K + 1) * C));  // slot 0: dw (K, C), then db (C)
  return part;
}

// The convolution in float32 (the public function adds float16's rounding under autocast).
Tensor depthwise_channels_last_f32(const Tensor& x, const Tensor& w, const Tensor& bias, int stride, int padding) {
  const ConvGeom g = channels_last_geometry(x, w, bias, stride, padding);
  const int64_t C = g.Cin, K = g.kh * g.kw;
  Tensor y = empty(Shape{g.B, g.Ho, g.Wo, C});
  const std::vector<float> wt = taps_by_channel(w, C, K);
  channels_last_forward_kernel(x.data(), wt.data(), bias.defined() ? bias.data() : nullptr, g, y.data());
  if (needs_grad(x, w, bias))
    attach_grad_fn(y, "conv2d_depthwise_channels_last", {x, w, bias},
                   [xs = x.detach(), ws = w.detach(), wt, g, C, K, rx = x.requires_grad(), rw = w.requires_grad(),
                    rb = bias.defined() && bias.requires_grad()](const Tensor& gy) -> Grads {
      // gy (B, Ho, Wo, C) -> dx (B, H, W, C), dw (C, 1, kh, kw), db (C)
      Tensor gx = rx ? zeros(xs.shape()) : Tensor(), gw, gb;
      const std::vector<float> dwt =
          channels_last_backward_kernel(xs.data(), wt.data(), gy.data(), g, rx ? gx.data() : nullptr, rw);
      if (rb) {
        gb = empty(Shape{C});
        std::copy(dwt.begin() + K * C, dwt.end(), gb.data());
      }
      if (rw) {  // (K, C) -> (C, 1, kh, kw)
        gw = empty(ws.shape());
        float* pw = gw.data();
        for (int64_t c = 0; c < C; ++c)
          for (int64_t k = 0; k < K; ++k) pw[c * K + k] = dwt[size_t(k * C + c)];
      }
      return {gx, gw, gb};
    });
  return y;
}

}  // namespace

Tensor conv2d_depthwise_channels_last(const Tensor& x, const Tensor& w, const Tensor& bias, int stride,
                                      int padding) {
  if (autocast_mode() == AutocastMode::FP16)  // CUDA's float16 conv: inputs, bias and output in float16
    return fp16_round(depthwise_channels_last_f32(fp16_round(x), fp16_round(w), fp16_round(bias), stride, padding));
  return depthwise_channels_last_f32(x, w, bias, stride, padding);  // float32 at bf16 too (docs/precision.md)
}

}  // namespace sima
