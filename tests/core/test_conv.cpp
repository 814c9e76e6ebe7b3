// conv2d and avg_pool2d: hand-computed values, a direct 7-loop convolution as the
// reference (groups, stride, padding, bias), gradchecks for every input incl.
// depthwise and bias undefined, and the errors.
#include "core/parallel.h"
#include "testing.h"

using namespace sima;
using namespace sima::testing;

namespace {

// y[b, co, oh, ow] = bias[co] + Σ_ci Σ_i Σ_j w[co, ci, i, j] · x[b, g·Cin/G + ci, oh·s − p + i, ow·s − p + j]
Tensor naive_conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, int s, int p, int G) {
  const int64_t B = x.size(0), Cin = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t Cout = w.size(0), Cg = w.size(1), kh = w.size(2), kw = w.size(3);
  const int64_t Ho = (H + 2 * p - kh) / s + 1, Wo = (W + 2 * p - kw) / s + 1, Cog = Cout / G;
  Tensor y = zeros({B, Cout, Ho, Wo});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t co = 0; co < Cout; ++co)
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          double acc = bias.defined() ? bias.data()[co] : 0.0;
          for (int64_t ci = 0; ci < Cg; ++ci)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                int64_t ih = oh * s - p + i, iw = ow * s - p + j, c = co / Cog * Cg + ci;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc += double(w.data()[((co * Cg + ci) * kh + i) * kw + j]) *
                       x.data()[((b * Cin + c) * H + ih) * W + iw];
              }
          y.data()[((b * Cout + co) * Ho + oh) * Wo + ow] = float(acc);
        }
  return y;
}

Tensor naive_avg_pool2d(const Tensor& x, int k, int s, int p) {
  const int64_t B = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t Ho = (H + 2 * p - k) / s + 1, Wo = (W + 2 * p - k) / s + 1;
  Tensor y = zeros({B, C, Ho, Wo});
  for (int64_t bc = 0; bc < B * C; ++bc)
    for (int64_t oh = 0; oh < Ho; ++oh)
      for (int64_t ow = 0; ow < Wo; ++ow) {
        double acc = 0;
        for (int i = 0; i < k; ++i)
          for (int j = 0; j < k; ++j) {
            int64_t ih = oh * s - p + i, iw = ow * s - p + j;
            if (ih >= 0 && ih < H && iw >= 0 && iw < W) acc += x.data()[(bc * H + ih) * W + iw];
          }
        y.data()[(bc * Ho + oh) * Wo + ow] = float(acc / (k * k));
      }
  return y;
}

struct ConvCase {
  const char* name;
  int64_t B, Cin, H, W, Cout, kh, kw;
  int stride, pad, groups;
  bool bias;
};

const std::vector<ConvCase> kCases = {
    {"3x3 pad 1", 2, 3, 5, 6, 4, 3, 3, 1, 1, 1, true},
    {"3x3 stride 2", 3, 2, 7, 6, 3, 3, 3, 2, 0, 1, true},
    {"stride 2 pad 1, no bias", 2, 2, 5, 5, 3, 3, 3, 2, 1, 1, false},
    {"2x3 kernel", 1, 2, 4, 5, 2, 2, 3, 1, 1, 1, true},
    {"groups 2", 2, 4, 5, 5, 6, 3, 3, 1, 1, 2, true},
    {"groups 2 stride 2 no bias", 3, 4, 6, 5, 2, 3, 3, 2, 1, 2, false},
    {"pointwise 1x1", 3, 3, 4, 3, 5, 1, 1, 1, 0, 1, true},
    {"patch embed (k = s)", 2, 3, 8, 8, 4, 4, 4, 4, 0, 1, true},
    {"kernel = padded input", 1, 2, 2, 3, 2, 4, 5, 1, 1, 1, true},
    {"depthwise 3x3 pad 1", 3, 3, 5, 6, 3, 3, 3, 1, 1, 3, true},
    {"depthwise stride 2", 2, 4, 7, 6, 4, 3, 3, 2, 1, 4, false},
    {"depthwise 5x5 pad 2", 2, 2, 6, 5, 2, 5, 5, 1, 2, 2, true},
    {"depthwise 2x3 stride 3", 2, 3, 7, 8, 3, 2, 3, 3, 1, 3, true},
    {"single channel", 2, 1, 4, 4, 1, 3, 3, 1, 1, 1, true},
};

}  // namespace

TEST_CASE("conv2d: hand-computed values") {
  Tensor x = from_vector({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3});
  // [[1, 0], [0, -1]]: x[i, j] - x[i+1, j+1] = -4 everywhere
  check_close(conv2d(x, from_vector({1, 0, 0, -1}, {1, 1, 2, 2})), {-4, -4, -4, -4});
  // A 3×3 box with padding 1 and stride 2: sums of the 2×2 corners of the 3×3 input.
  check_close(conv2d(x, ones({1, 1, 3, 3}), Tensor(), 2, 1), {12, 16, 24, 28});
  // Bias, and two output channels (the second kernel picks the centre, times 2).
  Tensor w = from_vector({0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0}, {2, 1, 3, 3});
  check_close(conv2d(x, w, from_vector({100, -1}), 1, 0), {105, 9});
  // Depthwise: each channel its own filter.
  Tensor x2 = from_vector({1, 2, 3, 4, 10, 20, 30, 40}, {1, 2, 2, 2});
  Tensor wd = from_vector({1, 1, 1, 1, 1, 0, 0, -1}, {2, 1, 2, 2});
  check_close(conv2d(x2, wd, Tensor(), 1, 0, 2), {10, -30});
}

TEST_CASE("conv2d: forward against the direct 7-loop convolution") {
  uint64_t seed = 1;
  for (const ConvCase& c : kCases) {
    CAPTURE(c.name);
    Tensor x = randn_leaf({c.B, c.Cin, c.H, c.W}, seed++, false);
    Tensor w = randn_leaf({c.Cout, c.Cin / c.groups, c.kh, c.kw}, seed++, false);
    Tensor b = c.bias ? randn_leaf({c.Cout}, seed++, false) : Tensor();
    Tensor y = conv2d(x, w, b, c.stride, c.pad, c.groups);
    check_close(y, naive_conv2d(x, w, b, c.stride, c.pad, c.groups), 1e-5f, 1e-5f);
  }
  // Bigger: several images per thread, columns reused across images.
  Tensor x = randn_leaf({5, 6, 12, 11}, 90, false), w = randn_leaf({8, 3, 3, 3}, 91, false);
  Tensor b = randn_leaf({8}, 92, false);
  CHECK(max_abs_diff(conv2d(x, w, b, 1, 1, 2), naive_conv2d(x, w, b, 1, 1, 2)) < 1e-4f);
  Tensor wd = randn_leaf({6, 1, 3, 3}, 93, false);
  CHECK(max_abs_diff(conv2d(x, wd, Tensor(), 2, 1, 6), naive_conv2d(x, wd, Tensor(), 2, 1, 6)) < 1e-4f);
}

TEST_CASE("conv2d: gradcheck for input, weight and bias") {
  uint64_t seed = 200;
  for (const ConvCase& c : kCases) {
    CAPTURE(c.name);
    Tensor x = randn_leaf({c.B, c.Cin, c.H, c.W}, seed++);
    Tensor w = randn_leaf({c.Cout, c.Cin / c.groups, c.kh, c.kw}, seed++);
    Tensor b = c.bias ? randn_leaf({c.Cout}, seed++) : Tensor();
    const int s = c.stride, p = c.pad, g = c.groups;
    CHECK_GRADCHECK([=](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], v[2], s, p, g); },
                    std::vector<Tensor>{x, w, b});
  }
  // Only the weight requires grad (frozen input), and only the input (frozen weight).
  Tensor x = randn_leaf({2, 2, 4, 4}, 300, false), w = randn_leaf({3, 2, 3, 3}, 301);
  CHECK_GRADCHECK([](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], Tensor(), 1, 1); },
                  std::vector<Tensor>{x, w});
  Tensor x2 = randn_leaf({2, 2, 4, 4}, 302), w2 = randn_leaf({2, 1, 3, 3}, 303, false);
  CHECK_GRADCHECK([](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], Tensor(), 1, 1, 2); },
                  std::vector<Tensor>{x2, w2});
  CHECK_FALSE(w2.grad().defined());
}

TEST_CASE("conv2d_depthwise_channels_last == permute, depthwise conv2d, permute back: values and gradients") {
  uint64_t seed = 400;
  for (const ConvCase& c : kCases) {
    if (c.groups != c.Cin || c.Cout != c.Cin) continue;  // the depthwise cases
    CAPTURE(c.name);
    Tensor x = randn_leaf({c.B, c.H, c.W, c.Cin}, seed++);  // channels last
    Tensor w = randn_leaf({c.Cout, 1, c.kh, c.kw}, seed++);
    Tensor b = c.bias ? randn_leaf({c.Cout}, seed++) : Tensor();
    const int s = c.stride, p = c.pad, g = c.groups;
    check_same([=](auto& v) { return conv2d_depthwise_channels_last(v[0], v[1], v[2], s, p); },
               [=](auto& v) { return permute(conv2d(permute(v[0], {0, 3, 1, 2}), v[1], v[2], s, p, g), {0, 2, 3, 1}); },
               {x, w, b});
    CHECK_GRADCHECK([=](const std::vector<Tensor>& v) { return conv2d_depthwise_channels_last(v[0], v[1], v[2], s, p); },
                    std::vector<Tensor>{x, w, b});
  }
  // many channels (the vectorised inner loop) on a tiny grid, stride 2: CvT's k/v projections
  Tensor x = randn_leaf({3, 4, 4, 40}, 450), w = randn_leaf({40, 1, 3, 3}, 451);
  check_same([](auto& v) { return conv2d_depthwise_channels_last(v[0], v[1], Tensor(), 2, 1); },
             [](auto& v) { return permute(conv2d(permute(v[0], {0, 3, 1, 2}), v[1], Tensor(), 2, 1, 40), {0, 2, 3, 1}); },
             {x, w});
  // the weight gradient sums over the batch in fixed blocks: the same bits at 1 and 2 threads
  auto weight_grad = [&](int threads) {
    const int before = num_threads();
    set_num_threads(threads);
    Tensor xb = randn_leaf({9, 5, 5, 16}, 460), wb = randn_leaf({16, 1, 3, 3}, 461);
    sum(conv2d_depthwise_channels_last(xb, wb, Tensor(), 1, 1)).backward();
    set_num_threads(before);
    return wb.grad();
  };
  CHECK(max_abs_diff(weight_grad(1), weight_grad(2)) == 0.f);
  CHECK(error_message([] { conv2d_depthwise_channels_last(randn({1, 4, 4, 3}), randn({4, 1, 3, 3})); })
            .find("must be (B, H, W, C)") != std::string::npos);
  CHECK(error_message([] { conv2d_depthwise_channels_last(randn({1, 2, 2, 3}), randn({3, 1, 5, 5})); })
            .find("larger than the padded input") != std::string::npos);
}

// conv2d_depthwise_heads's oracle: SOFT's original path, (B, h, H·W, d) -> (B·d, h, H, W), conv2d, back.
static Tensor heads_by_permutes(const Tensor& x, const Tensor& w, int64_t H, int64_t W, int p) {
  const int64_t B = x.size(0), h = x.size(1), d = x.size(3);
  Tensor y = conv2d(reshape(permute(x, {0, 3, 1, 2}), {B * d, h, H, W}), w, Tensor(), 1, p, int(h));
  return permute(reshape(y, {B, d, h, y.size(2) * y.size(3)}), {0, 2, 3, 1});
}

TEST_CASE("conv2d_depthwise_heads == permute, depthwise conv2d, permute back (y, dx bit for bit), gradcheck") {
  struct Case { int64_t B, h, H, W, d, k; int p; };
  const Case cases[] = {
      {3, 4, 7, 7, 16, 3, 1},  // the study's SOFT DeiT (d = 16: whole vectors)
      {2, 3, 5, 6, 5, 5, 2},   // H != W, d not a multiple of the vector width, k = 5
      {2, 2, 4, 4, 1, 1, 0},   // d = 1, 1x1
      {1, 2, 2, 2, 3, 3, 1},   // the kernel larger than the grid: most taps fall on padding
      {2, 2, 5, 4, 4, 3, 0},   // no padding: the output grid shrinks to 3x2
  };
  uint64_t seed = 500;
  for (const Case& c : cases) {
    CAPTURE(c.H);
    CAPTURE(c.W);
    CAPTURE(c.d);
    CAPTURE(c.k);
    Tensor x = randn_leaf({c.B, c.h, c.H * c.W, c.d}, seed++);
    Tensor w = randn_leaf({c.h, 1, c.k, c.k}, seed++);
    const int64_t H = c.H, W = c.W;
    const int p = c.p;
    auto fused = [=](auto& v) { return conv2d_depthwise_heads(v[0], v[1], H, W, p); };
    auto composed = [=](auto& v) { return heads_by_permutes(v[0], v[1], H, W, p); };
    // y and dx bit for bit (the weight frozen); dw in the same order, but the NCHW kernel's
    // products are rounded before the adds where this one fuses them, so to the last bits only
    check_same(fused, composed, {x, w.detach()}, Tolerance{0.f, 0.f});
    check_same(fused, composed, {x, w}, Tolerance{1e-5f, 1e-5f});
    CHECK_GRADCHECK([=](const std::vector<Tensor>& v) { return conv2d_depthwise_heads(v[0], v[1], H, W, p); },
                    std::vector<Tensor>{x, w});
  }
  // only the input, then only the weight, requires grad
  Tensor x = randn_leaf({2, 2, 9, 3}, 520), wf = randn_leaf({2, 1, 3, 3}, 521, false);
  CHECK_GRADCHECK([](const std::vector<Tensor>& v) { return conv2d_depthwise_heads(v[0], v[1], 3, 3, 1); },
                  std::vector<Tensor>{x, wf});
  CHECK_FALSE(wf.grad().defined());
  Tensor xf = randn_leaf({2, 2, 9, 3}, 522, false), w = randn_leaf({2, 1, 3, 3}, 523);
  CHECK_GRADCHECK([](const std::vector<Tensor>& v) { return conv2d_depthwise_heads(v[0], v[1], 3, 3, 1); },
                  std::vector<Tensor>{xf, w});
  CHECK_FALSE(xf.grad().defined());
  // the weight gradient sums over the batch inside one head's task: the same bits at 1 and 2 threads
  auto weight_grad = [&](int threads) {
    const int before = num_threads();
    set_num_threads(threads);
    Tensor xb = randn_leaf({9, 4, 49, 16}, 530), wb = randn_leaf({4, 1, 3, 3}, 531);
    sum(conv2d_depthwise_heads(xb, wb, 7, 7, 1)).backward();
    set_num_threads(before);
    return wb.grad();
  };
  CHECK(max_abs_diff(weight_grad(1), weight_grad(2)) == 0.f);
  CHECK(error_message([] { conv2d_depthwise_heads(randn({1, 3, 4, 2}), randn({4, 1, 3, 3}), 2, 2, 1); })
            .find("must be (B, h, H·W, d)") != std::string::npos);
  CHECK(error_message([] { conv2d_depthwise_heads(randn({1, 3, 5, 2}), randn({3, 1, 3, 3}), 2, 2, 1); })
            .find("has not H·W = 2·2 tokens") != std::string::npos);
  CHECK(error_message([] { conv2d_depthwise_heads(randn({1, 3, 4, 2}), randn({3, 1, 5, 5}), 2, 2, 1); })
            .find("larger than the padded grid") != std::string::npos);
}

TEST_CASE("avg_pool2d: values, gradcheck") {
  Tensor x = arange(16.f);
  Tensor x4 = from_vector(to_vector(add(x, 1.f)), {1, 1, 4, 4});
  check_close(avg_pool2d(x4, 2), {3.5f, 5.5f, 11.5f, 13.5f});
  // count_include_pad: the padded zeros count in the divisor 9.
  Tensor x3 = from_vector({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3});
  check_close(avg_pool2d(x3, 3, 2, 1), {12.f / 9, 16.f / 9, 24.f / 9, 28.f / 9});
  check_close(avg_pool2d(x3, 2, 1), {3, 4, 6, 7});
  struct P { int k, s, p; };
  uint64_t seed = 400;
  for (P c : {P{2, 0, 0}, P{3, 2, 1}, P{3, 1, 1}, P{2, 1, 0}, P{1, 2, 0}, P{4, 3, 2}}) {
    CAPTURE(c.k);
    CAPTURE(c.s);
    CAPTURE(c.p);
    Tensor xr = randn_leaf({2, 3, 5, 6}, seed++);
    check_close(avg_pool2d(xr, c.k, c.s, c.p), naive_avg_pool2d(xr, c.k, c.s ? c.s : c.k, c.p), 1e-5f, 1e-5f);
    CHECK_GRADCHECK([=](const std::vector<Tensor>& v) { return avg_pool2d(v[0], c.k, c.s, c.p); },
                    std::vector<Tensor>{xr});
  }
}

TEST_CASE("conv2d and avg_pool2d errors name the op and the shapes") {
  Tensor x = zeros({1, 4, 5, 5});
  CHECK_THROWS_WITH_AS(conv2d(zeros({4, 5, 5}), zeros({2, 4, 3, 3})),
                       "conv2d: input (4, 5, 5) must be 4-d (B, C, H, W)", Error);
  CHECK_THROWS_WITH_AS(conv2d(x, zeros({2, 4, 3})),
                       "conv2d: weight (2, 4, 3) must be 4-d (Cout, Cin/groups, kh, kw)", Error);
  CHECK_THROWS_WITH_AS(conv2d(x, zeros({2, 3, 3, 3})),
                       "conv2d: weight (2, 3, 3, 3) with groups 1 expects 3 input channels, got input (1, 4, 5, 5)",
                       Error);
  CHECK_THROWS_WITH_AS(conv2d(zeros({1, 5, 5, 5}), zeros({2, 2, 3, 3}), Tensor(), 1, 0, 2),
                       "conv2d: input (1, 5, 5, 5): 5 input channels are not divisible by groups 2", Error);
  CHECK_THROWS_WITH_AS(conv2d(x, zeros({3, 2, 3, 3}), Tensor(), 1, 0, 2),
                       "conv2d: weight (3, 2, 3, 3): 3 output channels are not divisible by groups 2", Error);
  CHECK_THROWS_WITH_AS(conv2d(x, zeros({2, 4, 8, 3}), Tensor(), 1, 1),
                       "conv2d: kernel 8x3 is bigger than the padded input 7x7 (input (1, 4, 5, 5), padding 1)",
                       Error);
  CHECK_THROWS_WITH_AS(conv2d(x, zeros({2, 4, 3, 3}), zeros({3})),
                       "conv2d: bias (3) does not match weight (2, 4, 3, 3) (expected (2))", Error);
  CHECK_THROWS_AS(conv2d(x, zeros({2, 4, 3, 3}), Tensor(), 0), Error);
  CHECK_THROWS_AS(conv2d(x, zeros({2, 4, 3, 3}), Tensor(), 1, -1), Error);
  CHECK_THROWS_AS(conv2d(x, zeros({2, 4, 3, 3}), Tensor(), 1, 0, 0), Error);
  CHECK_THROWS_WITH_AS(avg_pool2d(x, 6), "avg_pool2d: kernel 6x6 is bigger than the padded input 5x5 (input (1, 4, 5, 5), padding 0)",
                       Error);
  CHECK_THROWS_WITH_AS(avg_pool2d(x, 3, 1, 2), "avg_pool2d: padding 2 should be at most half of the kernel size 3",
                       Error);
  CHECK_THROWS_AS(avg_pool2d(zeros({4, 4}), 2), Error);
  CHECK_THROWS_AS(avg_pool2d(x, 0), Error);
}
