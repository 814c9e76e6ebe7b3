// F.interpolate on NCHW tensors: nearest, bilinear, bicubic, as PyTorch computes them.
//
// Every mode is separable: along each axis, output index o reads a few input indices
// ("taps") with weights, and
//   y[b, c, oh, ow] = Σ_a Σ_t  wh[oh][a] · ww[ow][t] · x[b, c, ih[oh][a], iw[ow][t]]
// with 1 tap per axis for nearest, 2 for bilinear, 4 for bicubic. The backward is
// linear in the same weights: each dy[oh, ow] is scattered back,
//   dx[b, c, ih[oh][a], iw[ow][t]] += wh[oh][a] · ww[ow][t] · dy[b, c, oh, ow]
// (taps may repeat an index at a clamped border: they add up, as in the forward).
//
// Source coordinate of output index o (PyTorch's area_pixel_compute_source_index):
//   align_corners:  src = o · (in − 1) / (out − 1)          (0 when out == 1)
//   otherwise:      src = (o + 0.5) · in / out − 0.5         clamped to >= 0 for bilinear,
//                                                            not for bicubic
// Bilinear: i0 = floor(src), λ = src − i0, taps (i0, i0+1 clamped) with (1 − λ, λ).
// Bicubic: taps i0−1 .. i0+2, each clamped into [0, in − 1], with Keys' cubic
//   convolution weights for A = −0.75 at distances 1+λ, λ, 1−λ, 2−λ.
// Nearest: src = min(floor(o · in / out), in − 1) (PyTorch's legacy 'nearest').
#include "core/ops/interpolate.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/parallel.h"

namespace sima {

namespace {

// PyTorch computes these in float (the opmath type of float32) from a float scale.
float source_scale(int64_t in, int64_t out, bool align_corners) {
  if (align_corners) return out > 1 ? static_cast<float>(in - 1) / static_cast<float>(out - 1) : 0.f;
  return static_cast<float>(in) / static_cast<float>(out);
}
float source_index(float scale, int64_t o, bool align_corners, bool cubic) {
  if (align_corners) return scale * static_cast<float>(o);
  float src = static_cast<float>(scale * (o + 0.5) - 0.5);
  return (!cubic && src < 0.f) ? 0.f : src;
}
// i0 = floor(src) (at most in − 1) and the fraction λ = src − i0 in [0, 1].
void floor_and_fraction(float src, int64_t in, int64_t& i0, float& lambda) {
  i0 = std::min(static_cast<int64_t>(std::floor(src)), in - 1);
  lambda = std::clamp(src - static_cast<float>(i0), 0.f, 1.f);
}

// Keys' cubic convolution kernel with A = −0.75, for |x| <= 1 and for 1 < |x| < 2.
float cubic1(float x, float A) { return ((A + 2) * x - (A + 3)) * x * x + 1; }
float cubic2(float x, float A) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; }

}  // namespace

InterpTaps interpolation_taps(int64_t in, int64_t out, InterpMode mode, bool align_corners) {
  InterpTaps a;
  a.taps = mode == InterpMode::Nearest ? 1 : mode == InterpMode::Bilinear ? 2 : 4;
  a.idx.resize(out * a.taps);
  a.w.resize(out * a.taps);
  const float scale = source_scale(in, out, align_corners);
  for (int64_t o = 0; o < out; ++o) {
    int64_t* idx = &a.idx[o * a.taps];
    float* w = &a.w[o * a.taps];
    if (mode == InterpMode::Nearest) {
      idx[0] = std::min(static_cast<int64_t>(std::floor(static_cast<float>(o) * scale)), in - 1);
      if (out == in) idx[0] = o;  // PyTorch's exact shortcuts for scale 1 and 2
      else if (out == 2 * in) idx[0] = o >> 1;
      w[0] = 1.f;
      continue;
    }
    const bool cubic = mode == InterpMode::Bicubic;
    int64_t i0;
    float t;
    floor_and_fraction(source_index(scale, o, align_corners, cubic), in, i0, t);
    if (!cubic) {
      idx[0] = i0;
      idx[1] = std::min(i0 + 1, in - 1);
      w[0] = 1.f - t;
      w[1] = t;
    } else {
      const float A = -0.75f;
      w[0] = cubic2(t + 1.f, A);
      w[1] = cubic1(t, A);
      const float t2 = 1.f - t;
      w[2] = cubic1(t2, A);
      w[3] = cubic2(t2 + 1.f, A);
      for (int k = 0; k < 4; ++k) idx[k] = std::clamp<int64_t>(i0 - 1 + k, 0, in - 1);
    }
  }
  return a;
}

// x (B, C, H, W) -> y (B, C, out_h, out_w)
Tensor interpolate(const Tensor& x, int64_t out_h, int64_t out_w, InterpMode mode,
                   bool align_corners) {
  check(x.defined(), "interpolate: undefined input");
  check(x.dim() == 4, "interpolate: input ", x.shape(), " must be 4-d (B, C, H, W)");
  check(mode != InterpMode::Nearest || !align_corners,
        "interpolate: align_corners can only be set with the bilinear and bicubic modes");
  const int64_t B = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  check(H > 0 && W > 0 && out_h > 0 && out_w > 0, "interpolate: input ", x.shape(),
        " to size (", out_h, ", ", out_w, "): sizes must be greater than 0");
  const InterpTaps th = interpolation_taps(H, out_h, mode, align_corners);
  const InterpTaps tw = interpolation_taps(W, out_w, mode, align_corners);
  const int nh = th.taps, nw = tw.taps;
  Tensor y = empty(Shape{B, C, out_h, out_w});
  const float* px = x.data();
  float* py = y.data();
  const int64_t grain = grain_for(kGrainElementwise, out_h * out_w * nh * nw);
  // One (b, c) plane per task.
  parallel_for(B * C, grain, [&](int64_t p0, int64_t p1) {
    for (int64_t pl = p0; pl < p1; ++pl) {
      const float* xp = px + pl * H * W;
      float* yp = py + pl * out_h * out_w;
      for (int64_t oh = 0; oh < out_h; ++oh)
        for (int64_t ow = 0; ow < out_w; ++ow) {
          float s = 0.f;
          for (int a = 0; a < nh; ++a) {
            const float* xr = xp + th.idx[oh * nh + a] * W;
            float r = 0.f;
            for (int t = 0; t < nw; ++t) r += tw.w[ow * nw + t] * xr[tw.idx[ow * nw + t]];
            s += th.w[oh * nh + a] * r;
          }
          yp[oh * out_w + ow] = s;
        }
    }
  });

  if (needs_grad(x))
    attach_grad_fn(y, "interpolate", {x}, [xshape = x.shape(), th, tw, H, W, out_h, out_w,
                                           grain](const Tensor& gy) -> Grads {
      // gy (B, C, out_h, out_w) -> gx (B, C, H, W)
      Tensor gx = zeros(xshape);
      const int nh = th.taps, nw = tw.taps;
      const float* pg = gy.data();
      float* pd = gx.data();
      parallel_for(xshape[0] * xshape[1], grain, [&](int64_t p0, int64_t p1) {
        for (int64_t pl = p0; pl < p1; ++pl) {
          const float* gp = pg + pl * out_h * out_w;
          float* dp = pd + pl * H * W;
          for (int64_t oh = 0; oh < out_h; ++oh)
            for (int64_t ow = 0; ow < out_w; ++ow) {
              const float g = gp[oh * out_w + ow];
              for (int a = 0; a < nh; ++a) {
                float* dr = dp + th.idx[oh * nh + a] * W;
                const float ga = g * th.w[oh * nh + a];
                for (int t = 0; t < nw; ++t) dr[tw.idx[ow * nw + t]] += ga * tw.w[ow * nw + t];
              }
            }
        }
      });
      return {gx};
    });
  return y;
}

}  // namespace sima
