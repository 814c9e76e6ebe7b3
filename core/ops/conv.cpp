// conv2d (im2col + GEMM per group) and avg_pool2d on NCHW tensors.
//
// im2col turns one image x_b (Cin, H, W) into columns (Cin·kh·kw, Ho·Wo): row
// (c, i, j) holds, for every output position (oh, ow), the input value under tap
// (i, j) of channel c, x_b[c, oh·s − p + i, ow·s − p + j] (0 on padding). The
// weight (Cout, Cin/G, kh, kw) is already a (Cout, Cin/G·kh·kw) matrix, and the
// rows of group g are the contiguous block of columns of its Cin/G channels, so
//   y_b[g] (Cout/G, Ho·Wo) = W_g (Cout/G, Cin/G·kh·kw) · cols_g (Cin/G·kh·kw, Ho·Wo)
// Backward of that product (see matmul.cpp):
//   dW_g += dy_b[g] · cols_gᵀ   summed over images
//   dcols_g = W_gᵀ · dy_b[g],   then col2im (the adjoint of im2col: every column
//                                entry is added back to the input pixel it was read from)
//   db[co] = Σ_b Σ_(oh,ow) dy[b, co, oh, ow]
// Depthwise (groups == Cin == Cout) is a direct loop in conv_depthwise.cpp.
#include "core/ops/conv.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/autograd.h"
#include "core/ops/autocast.h"
#include "core/error.h"
#include "core/ops/conv_kernels.h"
#include "core/ops/gemm.h"
#include "core/parallel.h"

namespace sima {

namespace {

// x (C, H, W) -> cols (C·kh·kw, Ho·Wo)
void im2col(const float* x, const ConvGeom& g, float* cols) {
  const int64_t HW = g.Ho * g.Wo;
  for (int64_t c = 0; c < g.Cin; ++c)
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) {
        float* row = cols + ((c * g.kh + i) * g.kw + j) * HW;
        std::memset(row, 0, sizeof(float) * HW);
        int64_t oh0, oh1, ow0, ow1;
        valid_range(i - g.pad, g.stride, g.H, g.Ho, oh0, oh1);
        valid_range(j - g.pad, g.stride, g.W, g.Wo, ow0, ow1);
        for (int64_t oh = oh0; oh < oh1; ++oh) {
          const float* xr = x + (c * g.H + oh * g.stride - g.pad + i) * g.W + j - g.pad;
          float* r = row + oh * g.Wo;
          if (g.stride == 1) std::memcpy(r + ow0, xr + ow0, sizeof(float) * (ow1 - ow0));
          else
            for (int64_t ow = ow0; ow < ow1; ++ow) r[ow] = xr[ow * g.stride];
        }
      }
}

// cols (C·kh·kw, Ho·Wo) -> dx (C, H, W) += ...   (the adjoint of im2col; dx zeroed by the caller)
void col2im(const float* cols, const ConvGeom& g, float* dx) {
  const int64_t HW = g.Ho * g.Wo;
  for (int64_t c = 0; c < g.Cin; ++c)
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) {
        const float* row = cols + ((c * g.kh + i) * g.kw + j) * HW;
        int64_t oh0, oh1, ow0, ow1;
        valid_range(i - g.pad, g.stride, g.H, g.Ho, oh0, oh1);
        valid_range(j - g.pad, g.stride, g.W, g.Wo, ow0, ow1);
        for (int64_t oh = oh0; oh < oh1; ++oh) {
          float* xr = dx + (c * g.H + oh * g.stride - g.pad + i) * g.W + j - g.pad;
          const float* r = row + oh * g.Wo;
          for (int64_t ow = ow0; ow < ow1; ++ow) xr[ow * g.stride] += r[ow];
        }
      }
}

// A 1×1 kernel with stride 1 and no padding reads every pixel once: cols = x itself.
bool is_pointwise(const ConvGeom& g) { return g.kh == 1 && g.kw == 1 && g.stride == 1 && g.pad == 0; }

// The images [0, B) are split into `chunks` fixed ranges, one per thread (a single
// one inside a parallel region). Per-chunk partial sums are then added in chunk order,
// so results are reproducible at a given thread count.
int64_t image_chunks(int64_t B) {
  return in_parallel() ? 1 : std::max<int64_t>(1, std::min<int64_t>(num_threads(), B));
}
template <class F>  // f(chunk, b0, b1)
void for_image_chunks(int64_t chunks, int64_t B, F&& f) {
  parallel_for(chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) f(c, B * c / chunks, B * (c + 1) / chunks);
  });
}

// The geometry of conv2d(x, w, bias, stride, padding, groups), once the shapes are checked.
ConvGeom conv2d_geometry(const Tensor& x, const Tensor& w, const Tensor& bias, int stride, int padding,
                         int groups) {
  check(x.defined() && w.defined(), "conv2d: undefined input or weight");
  check(x.dim() == 4, "conv2d: input ", x.shape(), " must be 4-d (B, C, H, W)");
  check(w.dim() == 4, "conv2d: weight ", w.shape(), " must be 4-d (Cout, Cin/groups, kh, kw)");
  check(stride >= 1 && padding >= 0 && groups >= 1, "conv2d: stride ", stride, ", padding ",
        padding, ", groups ", groups, ": need stride >= 1, padding >= 0, groups >= 1");
  ConvGeom g{x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(2), w.size(3),
             0,         0,         stride,    padding,   groups};
  check(g.Cin % groups == 0, "conv2d: input ", x.shape(), ": ", g.Cin,
        " input channels are not divisible by groups ", groups);
  check(g.Cout % groups == 0, "conv2d: weight ", w.shape(), ": ", g.Cout,
        " output channels are not divisible by groups ", groups);
  check(w.size(1) * groups == g.Cin, "conv2d: weight ", w.shape(), " with groups ", groups,
        " expects ", w.size(1) * groups, " input channels, got input ", x.shape());
  check(g.kh <= g.H + 2 * g.pad && g.kw <= g.W + 2 * g.pad, "conv2d: kernel ", g.kh, "x", g.kw,
        " is bigger than the padded input ", g.H + 2 * g.pad, "x", g.W + 2 * g.pad, " (input ",
        x.shape(), ", padding ", padding, ")");
  check(!bias.defined() || (bias.dim() == 1 && bias.size(0) == g.Cout), "conv2d: bias ",
        bias.defined() ? bias.shape().str() : "", " does not match weight ", w.shape(),
        " (expected (", g.Cout, "))");
  g.Ho = (g.H + 2 * g.pad - g.kh) / g.stride + 1;
  g.Wo = (g.W + 2 * g.pad - g.kw) / g.stride + 1;
  return g;
}

// ---- forward and backward kernels (im2col + GEMM per group) ------------------------

// x (B, Cin, H, W), w (Cout, Cin/G, kh, kw), bias (Cout) or null -> y (B, Cout, Ho, Wo):
//   y_b[g] = W_g · cols_g (+ bias), cols = im2col(x_b)
void conv2d_forward_kernel(const float* x, const float* w, const float* bias, const ConvGeom& g, float* y) {
  const int64_t G = g.groups, Cog = g.Cout / G, Kg = g.Cin / G * g.kh * g.kw;  // per group
  const int64_t HW = g.Ho * g.Wo, Kdim = g.Cin * g.kh * g.kw;
  const bool pointwise = is_pointwise(g);
  const int64_t chunks = image_chunks(g.B);
  std::vector<Tensor> cols_buf(chunks);
  for_image_chunks(chunks, g.B, [&](int64_t c, int64_t b0, int64_t b1) {
    if (!pointwise && b0 < b1) cols_buf[c] = empty(Shape{Kdim, HW});
    for (int64_t b = b0; b < b1; ++b) {
      const float* xb = x + b * g.Cin * g.H * g.W;
      float* yb = y + b * g.Cout * HW;
      const float* cols = xb;
      if (!pointwise) {
        im2col(xb, g, cols_buf[c].data());
        cols = cols_buf[c].data();
      }
      if (bias)  // y starts as the bias, the GEMM adds to it
        for (int64_t co = 0; co < g.Cout; ++co) std::fill(yb + co * HW, yb + (co + 1) * HW, bias[co]);
      for (int64_t gi = 0; gi < G; ++gi)  // y_b[g] = W_g · cols_g (+ bias)
        gemm(false, false, Cog, HW, Kg, w + gi * Cog * Kg, cols + gi * Kg * HW, bias ? 1.f : 0.f,
             yb + gi * Cog * HW);
    }
  });
}

// db[co] = Σ_b Σ_hw dy[b, co, hw]; gy (B, Cout, Ho, Wo) -> db (Cout)
void conv2d_bias_backward(const float* gy, const ConvGeom& g, float* db) {
  const int64_t HW = g.Ho * g.Wo;
  parallel_for(g.Cout, grain_for(kGrainElementwise, g.B * HW), [&](int64_t c0, int64_t c1) {
    for (int64_t co = c0; co < c1; ++co) {
      float s = 0.f;
      for (int64_t b = 0; b < g.B; ++b) {
        const float* r = gy + (b * g.Cout + co) * HW;
        for (int64_t i = 0; i < HW; ++i) s += r[i];
      }
      db[co] = s;
    }
  });
}

// Backward of conv2d_forward_kernel (docs/derivations.md §7), from gy (B, Cout, Ho, Wo):
//   dW_g += dy_b[g] · cols_gᵀ          -> dw (Cout, Cin/G, kh, kw), zeroed by the caller
//   dx_b = col2im(W_gᵀ · dy_b[g])      -> dx (B, Cin, H, W), zeroed by the caller
//   db[co] = Σ_b Σ_hw dy[b, co, hw]    -> db (Cout)
// A null output is not wanted. dW is summed per chunk of images, then the chunks in order.
void conv2d_backward_kernel(const float* x, const float* w, const float* gy, const ConvGeom& g, float* dx,
                            float* dw, float* db) {
  const int64_t G = g.groups, Cog = g.Cout / G, Kg = g.Cin / G * g.kh * g.kw;  // per group
  const int64_t HW = g.Ho * g.Wo, Kdim = g.Cin * g.kh * g.kw;
  const bool pointwise = is_pointwise(g);
  const int64_t chunks = image_chunks(g.B);
  std::vector<Tensor> gw_part(chunks), cols_buf(chunks);
  for_image_chunks(chunks, g.B, [&](int64_t c, int64_t b0, int64_t b1) {
    if (b0 == b1) return;
    if (dw) gw_part[c] = empty(Shape{g.Cout, Kg});
    if (!pointwise) cols_buf[c] = empty(Shape{Kdim, HW});
    for (int64_t b = b0; b < b1; ++b) {
      const float* gyb = gy + b * g.Cout * HW;
      if (dw) {  // dW_g (Cog, Kg) += dy_b[g] (Cog, HW) · cols_gᵀ (HW, Kg)
        const float* xb = x + b * g.Cin * g.H * g.W;
        const float* cols = xb;
        if (!pointwise) {
          im2col(xb, g, cols_buf[c].data());
          cols = cols_buf[c].data();
        }
        for (int64_t gi = 0; gi < G; ++gi)
          gemm(false, true, Cog, Kg, HW, gyb + gi * Cog * HW, cols + gi * Kg * HW, b == b0 ? 0.f : 1.f,
               gw_part[c].data() + gi * Cog * Kg);
      }
      if (dx) {  // dcols_g (Kg, HW) = W_gᵀ (Kg, Cog) · dy_b[g] (Cog, HW), then col2im
        float* dxb = dx + b * g.Cin * g.H * g.W;
        float* dcols = pointwise ? dxb : cols_buf[c].data();
        for (int64_t gi = 0; gi < G; ++gi)
          gemm(true, false, Kg, HW, Cog, w + gi * Cog * Kg, gyb + gi * Cog * HW, 0.f, dcols + gi * Kg * HW);
        if (!pointwise) col2im(dcols, g, dxb);
      }
    }
  });
  if (dw)  // sum the per-chunk partials in chunk order (deterministic)
    for (const Tensor& part : gw_part) {
      if (!part.defined()) continue;
      const float* s = part.data();
      for (int64_t i = 0; i < g.Cout * Kg; ++i) dw[i] += s[i];
    }
  if (db) conv2d_bias_backward(gy, g, db);
}

}  // namespace

// ---- conv2d ---------------------------------------------------------------------
// x (B, Cin, H, W), weight (Cout, Cin/G, kh, kw), bias (Cout) -> y (B, Cout, Ho, Wo)
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, int stride, int padding,
              int groups) {
  const ConvGeom g = conv2d_geometry(x, w, bias, stride, padding, groups);
  if (groups == g.Cin && g.Cout == g.Cin) {
    if (autocast_mode() == AutocastMode::FP16)  // CUDA's float16 conv: inputs, bias and output in float16
      return fp16_round(conv2d_depthwise(fp16_round(x), fp16_round(w), fp16_round(bias), g));
    return conv2d_depthwise(x, w, bias, g);  // float32 at bf16 too (docs/precision.md)
  }
  Tensor y = empty(Shape{g.B, g.Cout, g.Ho, g.Wo});
  conv2d_forward_kernel(x.data(), w.data(), bias.defined() ? bias.data() : nullptr, g, y.data());
  if (needs_grad(x, w, bias))
    attach_grad_fn(y, "conv2d", {x, w, bias}, [xs = x.detach(), ws = w.detach(), g, rx = x.requires_grad(),
                                               rw = w.requires_grad(),
                                               rb = bias.defined() && bias.requires_grad()](
                                                  const Tensor& gy) -> Grads {
      // gy (B, Cout, Ho, Wo) -> dx (B, Cin, H, W), dw (Cout, Cin/G, kh, kw), db (Cout)
      Tensor gx = rx ? zeros(xs.shape()) : Tensor(), gw = rw ? zeros(ws.shape()) : Tensor();
      Tensor gb = rb ? empty(Shape{g.Cout}) : Tensor();
      conv2d_backward_kernel(xs.data(), ws.data(), gy.data(), g, rx ? gx.data() : nullptr,
                             rw ? gw.data() : nullptr, rb ? gb.data() : nullptr);
      return {gx, gw, gb};
    });
  return y;
}

// ---- avg_pool2d -----------------------------------------------------------------
// x (B, C, H, W) -> y (B, C, Ho, Wo), Ho = (H + 2p - k) / s + 1
//   y[oh, ow] = (1 / k²) Σ_(i,j) x[oh·s − p + i, ow·s − p + j]   (padding counts as 0s:
//   count_include_pad=True, and without ceil_mode no window reaches past the padding,
//   so the divisor is always k²)
// Backward: each dy[oh, ow] / k² goes back to every pixel of its window.
Tensor avg_pool2d(const Tensor& x, int kernel, int stride, int padding) {
  check(x.defined(), "avg_pool2d: undefined input");
  if (stride == 0) stride = kernel;
  check(x.dim() == 4, "avg_pool2d: input ", x.shape(), " must be 4-d (B, C, H, W)");
  check(kernel >= 1 && stride >= 1 && padding >= 0, "avg_pool2d: kernel ", kernel, ", stride ",
        stride, ", padding ", padding, ": need kernel >= 1, stride >= 1, padding >= 0");
  check(2 * padding <= kernel, "avg_pool2d: padding ", padding,
        " should be at most half of the kernel size ", kernel);
  const int64_t B = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), k = kernel;
  check(k <= H + 2 * padding && k <= W + 2 * padding, "avg_pool2d: kernel ", k, "x", k,
        " is bigger than the padded input ", H + 2 * padding, "x", W + 2 * padding, " (input ",
        x.shape(), ", padding ", padding, ")");
  const int64_t Ho = (H + 2 * padding - k) / stride + 1, Wo = (W + 2 * padding - k) / stride + 1;
  const float scale = 1.f / static_cast<float>(k * k);
  // Calls f(plane, oh, ow, h0, h1, w0, w1) for every output pixel of every (b, c) plane,
  // with [h0, h1) x [w0, w1) its window clipped to the unpadded input; planes in parallel.
  auto for_each_window = [=](int64_t planes, auto&& f) {
    parallel_for(planes, grain_for(kGrainElementwise, Ho * Wo * k * k),
                 [&](int64_t p0, int64_t p1) {
                   for (int64_t pl = p0; pl < p1; ++pl)
                     for (int64_t oh = 0; oh < Ho; ++oh)
                       for (int64_t ow = 0; ow < Wo; ++ow) {
                         int64_t h = oh * stride - padding, w = ow * stride - padding;
                         f(pl, oh, ow, std::max<int64_t>(0, h), std::min<int64_t>(H, h + k),
                           std::max<int64_t>(0, w), std::min<int64_t>(W, w + k));
                       }
                 });
  };
  Tensor y = empty(Shape{B, C, Ho, Wo});
  const float* px = x.data();
  float* py = y.data();
  for_each_window(B * C, [&](int64_t pl, int64_t oh, int64_t ow, int64_t h0, int64_t h1, int64_t w0,
                             int64_t w1) {
    const float* xp = px + pl * H * W;
    float s = 0.f;
    for (int64_t ih = h0; ih < h1; ++ih)
      for (int64_t iw = w0; iw < w1; ++iw) s += xp[ih * W + iw];
    py[(pl * Ho + oh) * Wo + ow] = s * scale;
  });
  if (needs_grad(x))
    attach_grad_fn(y, "avg_pool2d", {x}, [xshape = x.shape(), H, W, Ho, Wo, scale,
                                          for_each_window](const Tensor& gy) -> Grads {
      // gy (B, C, Ho, Wo) -> gx (B, C, H, W); a plane's windows are visited by one thread
      Tensor gx = zeros(xshape);
      const float* pg = gy.data();
      float* pd = gx.data();
      for_each_window(xshape[0] * xshape[1], [&](int64_t pl, int64_t oh, int64_t ow, int64_t h0,
                                                 int64_t h1, int64_t w0, int64_t w1) {
        float* dp = pd + pl * H * W;
        float v = pg[(pl * Ho + oh) * Wo + ow] * scale;
        for (int64_t ih = h0; ih < h1; ++ih)
          for (int64_t iw = w0; iw < w1; ++iw) dp[ih * W + iw] += v;
      });
      return {gx};
    });
  return y;
}

}  // namespace sima
