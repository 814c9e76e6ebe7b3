// interpolate: exact values worked out by hand, a direct scalar implementation of
// PyTorch's formulas (its legacy per-pixel kernels) as the reference, gradchecks for
// every mode with align_corners both ways, upsampling and downsampling, and the errors.
#include <cmath>

#include "testing.h"

using namespace sima;
using namespace sima::testing;

namespace {

float ref_scale(int64_t in, int64_t out, bool ac) {
  if (ac) return out > 1 ? float(in - 1) / float(out - 1) : 0.f;
  return float(in) / float(out);
}
float ref_source(float scale, int64_t dst, bool ac, bool cubic) {
  if (ac) return scale * float(dst);
  float src = float(scale * (dst + 0.5) - 0.5);
  return (!cubic && src < 0) ? 0.f : src;
}
float conv1(float x, float A) { return ((A + 2) * x - (A + 3)) * x * x + 1; }          // |x| <= 1
float conv2(float x, float A) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; }  // 1 < |x| < 2
float cubic_interp1d(float x0, float x1, float x2, float x3, float t) {
  const float A = -0.75f;
  return x0 * conv2(t + 1, A) + x1 * conv1(t, A) + x2 * conv1(1 - t, A) + x3 * conv2(2 - t, A);
}

// One output pixel, computed the way PyTorch's per-pixel kernels do.
float ref_pixel(const float* x, int64_t H, int64_t W, int64_t oh, int64_t ow, int64_t OH, int64_t OW,
                InterpMode mode, bool ac) {
  const float sh = ref_scale(H, OH, ac), sw = ref_scale(W, OW, ac);
  if (mode == InterpMode::Nearest) {
    int64_t ih = std::min<int64_t>(int64_t(std::floor(float(oh) * float(H) / float(OH))), H - 1);
    int64_t iw = std::min<int64_t>(int64_t(std::floor(float(ow) * float(W) / float(OW))), W - 1);
    return x[ih * W + iw];
  }
  if (mode == InterpMode::Bilinear) {
    float h1r = ref_source(sh, oh, ac, false), w1r = ref_source(sw, ow, ac, false);
    int64_t h1 = int64_t(h1r), w1 = int64_t(w1r);
    int64_t h1p = h1 < H - 1 ? 1 : 0, w1p = w1 < W - 1 ? 1 : 0;
    float h1l = h1r - h1, h0l = 1 - h1l, w1l = w1r - w1, w0l = 1 - w1l;
    return h0l * (w0l * x[h1 * W + w1] + w1l * x[h1 * W + w1 + w1p]) +
           h1l * (w0l * x[(h1 + h1p) * W + w1] + w1l * x[(h1 + h1p) * W + w1 + w1p]);
  }
  float ry = ref_source(sh, oh, ac, true), rx = ref_source(sw, ow, ac, true);
  int64_t iy = int64_t(std::floor(ry)), ix = int64_t(std::floor(rx));
  float ty = ry - iy, tx = rx - ix;
  auto at = [&](int64_t y, int64_t xx) {  // border-clamped read
    y = std::clamp<int64_t>(y, 0, H - 1);
    xx = std::clamp<int64_t>(xx, 0, W - 1);
    return x[y * W + xx];
  };
  float rows[4];
  for (int k = 0; k < 4; ++k)
    rows[k] = cubic_interp1d(at(iy - 1 + k, ix - 1), at(iy - 1 + k, ix), at(iy - 1 + k, ix + 1),
                             at(iy - 1 + k, ix + 2), tx);
  return cubic_interp1d(rows[0], rows[1], rows[2], rows[3], ty);
}

Tensor ref_interpolate(const Tensor& x, int64_t OH, int64_t OW, InterpMode mode, bool ac) {
  const int64_t P = x.size(0) * x.size(1), H = x.size(2), W = x.size(3);
  Tensor y = empty({x.size(0), x.size(1), OH, OW});
  for (int64_t p = 0; p < P; ++p)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow)
        y.data()[(p * OH + oh) * OW + ow] = ref_pixel(x.data() + p * H * W, H, W, oh, ow, OH, OW, mode, ac);
  return y;
}

const char* mode_name(InterpMode m) {
  return m == InterpMode::Nearest ? "nearest" : m == InterpMode::Bilinear ? "bilinear" : "bicubic";
}

struct Sizes {
  int64_t H, W, OH, OW;
};
// Runs f(s, mode, align_corners) for every size and mode, align_corners both ways (nearest
// has no align_corners), with all of it captured.
template <class F>
void for_each_case(const std::vector<Sizes>& sizes, F&& f) {
  for (Sizes s : sizes)
    for (InterpMode m : {InterpMode::Nearest, InterpMode::Bilinear, InterpMode::Bicubic})
      for (bool ac : {false, true}) {
        if (m == InterpMode::Nearest && ac) continue;
        CAPTURE(mode_name(m));
        CAPTURE(ac);
        CAPTURE(s.H);
        CAPTURE(s.W);
        CAPTURE(s.OH);
        CAPTURE(s.OW);
        f(s, m, ac);
      }
}

}  // namespace

TEST_CASE("interpolate: exact values") {
  Tensor x = from_vector({1, 2, 3, 4}, {1, 1, 2, 2});
  check_close(interpolate(x, 4, 4, InterpMode::Nearest),
              {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4});
  // Nearest 4 -> 3: src = floor(o · 4/3) = 0, 1, 2.
  check_close(interpolate(from_vector({5, 6, 7, 8}, {1, 1, 1, 4}), 1, 3, InterpMode::Nearest), {5, 6, 7});
  // Bilinear, align_corners: the corners stay, the middle is the average.
  Tensor y = from_vector({0, 1, 2, 3}, {1, 1, 2, 2});
  check_close(interpolate(y, 3, 3, InterpMode::Bilinear, true), {0, 0.5f, 1, 1, 1.5f, 2, 2, 2.5f, 3});
  // Bilinear, half-pixel centres: src = (o + 0.5)/2 - 0.5 = -0.25 (clamped to 0), 0.25, 0.75, 1.25.
  Tensor r = from_vector({0, 1}, {1, 1, 1, 2});
  check_close(interpolate(r, 1, 4, InterpMode::Bilinear), {0, 0.25f, 0.75f, 1});
  // Downsampling 4 -> 2: src = 0.5, 2.5, the mean of each pair.
  check_close(interpolate(from_vector({0, 1, 2, 3}, {1, 1, 1, 4}), 1, 2, InterpMode::Bilinear), {0.5f, 2.5f});
  // Bicubic, half-pixel centres, [0, 1] -> 4. Output 0: src = -0.25 (not clamped), i0 = -1,
  // t = 0.75, taps -2..1 clamp to 0, 0, 0, 1, so y = W(1 + 0.25) = W(1.25) with Keys' kernel
  // W(x) = A|x|³ - 5A|x|² + 8A|x| - 4A, A = -0.75: -0.10546875. Output 1: src = 0.25,
  // taps 0, 0, 1, 1, y = W(0.75) + W(1.75) = 0.26171875 - 0.03515625 = 0.2265625.
  check_close(interpolate(r, 1, 4, InterpMode::Bicubic), {-0.10546875f, 0.2265625f, 0.7734375f, 1.10546875f},
              1e-6f, 1e-6f);
  // Bicubic with align_corners at the same size is the identity; so are all modes.
  Tensor z = randn_leaf({2, 3, 4, 5}, 1, false);
  for (InterpMode m : {InterpMode::Nearest, InterpMode::Bilinear, InterpMode::Bicubic})
    check_close(interpolate(z, 4, 5, m, m != InterpMode::Nearest), z, 1e-6f, 1e-6f);
  check_close(interpolate(z, 4, 5, InterpMode::Bicubic, false), z, 1e-6f, 1e-6f);
  // One output pixel: align_corners takes the corner, half-pixel the centre.
  Tensor q = from_vector({0, 1, 2, 3, 4, 5, 6, 7, 8}, {1, 1, 3, 3});
  check_close(interpolate(q, 1, 1, InterpMode::Bilinear, true), std::vector<float>{0});
  check_close(interpolate(q, 1, 1, InterpMode::Bilinear, false), std::vector<float>{4});
}

TEST_CASE("interpolate: forward against PyTorch's per-pixel formulas") {
  const std::vector<Sizes> sizes = {{3, 4, 7, 9}, {4, 4, 8, 8}, {7, 9, 3, 4}, {5, 6, 5, 3},
                                    {2, 3, 1, 1}, {1, 1, 3, 2}, {14, 14, 24, 24}, {6, 5, 12, 10}};
  uint64_t seed = 10;
  for_each_case(sizes, [&](Sizes s, InterpMode m, bool ac) {
    Tensor x = randn_leaf({2, 3, s.H, s.W}, seed++, false);
    check_close(interpolate(x, s.OH, s.OW, m, ac), ref_interpolate(x, s.OH, s.OW, m, ac), 1e-5f, 1e-5f);
  });
}

TEST_CASE("interpolate: gradcheck, up and down, align_corners both ways") {
  const std::vector<Sizes> sizes = {{3, 4, 5, 7}, {5, 6, 3, 2}, {4, 3, 4, 3}, {2, 4, 1, 6}, {1, 3, 2, 2}};
  uint64_t seed = 100;
  for_each_case(sizes, [&](Sizes s, InterpMode m, bool ac) {
    Tensor x = randn_leaf({2, 2, s.H, s.W}, seed++);
    CHECK_GRADCHECK([=](const std::vector<Tensor>& v) { return interpolate(v[0], s.OH, s.OW, m, ac); },
                    std::vector<Tensor>{x});
  });
}

TEST_CASE("interpolate errors") {
  CHECK_THROWS_WITH_AS(interpolate(zeros({3, 4, 4}), 2, 2, InterpMode::Bilinear),
                       "interpolate: input (3, 4, 4) must be 4-d (B, C, H, W)", Error);
  CHECK_THROWS_WITH_AS(interpolate(zeros({1, 1, 4, 4}), 2, 2, InterpMode::Nearest, true),
                       "interpolate: align_corners can only be set with the bilinear and bicubic modes",
                       Error);
  CHECK_THROWS_WITH_AS(interpolate(zeros({1, 1, 4, 4}), 0, 2, InterpMode::Bicubic),
                       "interpolate: input (1, 1, 4, 4) to size (0, 2): sizes must be greater than 0",
                       Error);
  CHECK_THROWS_AS(interpolate(zeros({1, 1, 0, 4}), 2, 2, InterpMode::Bilinear), Error);
}
