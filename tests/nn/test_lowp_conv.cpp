// LowpConv2d (core/ops/lowp_conv.h): oneDNN's convolution for inference, against our conv2d.
// - float32 (F32, and Int8, which runs its convolutions in float32): conv2d's values up to the
//   order of the sums, for plain, strided, padded, grouped, depthwise and pointwise kernels,
//   with and without bias, in both layouts in and out;
// - bf16: conv2d of the bf16-rounded input and weight, up to the order of the float32 sums;
// - Conv2d with lowp set: the float32 path, bit for bit, whenever a gradient is asked for;
// - a wrong input is a clear error.
#include <doctest/doctest.h>

#include <string>

#include "core/autograd.h"
#include "core/ops/conv.h"
#include "core/ops/lowp_conv.h"
#include "core/ops/lowp_gemm.h"
#include "core/ops/shape_ops.h"
#include "nn/conv2d.h"
#include "testing.h"

using namespace sima;
using sima::testing::error_message;
using sima::testing::max_abs_diff;
using sima::testing::randn_leaf;
using sima::testing::rel_l2_error;

namespace {

struct Geometry {
  int64_t B, Cin, H, W, Cout, k;
  int stride, padding, groups;
  bool bias;
};

const Geometry kGeometries[] = {
    {3, 1, 28, 28, 8, 7, 2, 3, 1, true},    // CvT's first embedding
    {2, 6, 9, 7, 10, 3, 2, 1, 1, false},    // strided, padded, not square
    {2, 6, 8, 8, 4, 3, 1, 1, 2, true},      // grouped
    {2, 12, 7, 7, 12, 3, 2, 1, 12, false},  // depthwise (CvT's k/v projections)
    {2, 5, 6, 6, 7, 1, 1, 0, 1, true},      // pointwise
    {2, 3, 32, 32, 16, 4, 4, 0, 1, true},   // DeiT's patch embedding: kernel = stride
};

Tensor nhwc(const Tensor& x) { return contiguous(permute(x, {0, 2, 3, 1})); }

Tensor rounded_to_bf16(const Tensor& x) {
  Tensor r = empty(x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) r.data()[i] = round_to_bf16(x.data()[i]);
  return r;
}

}  // namespace

TEST_CASE("LowpConv2d equals conv2d at every precision, in both layouts") {
  uint64_t seed = 50;
  for (const Geometry& g : kGeometries) {
    const Tensor x = randn_leaf({g.B, g.Cin, g.H, g.W}, seed++, false);
    const Tensor w = randn_leaf({g.Cout, g.Cin / g.groups, g.k, g.k}, seed++, false);
    const Tensor b = g.bias ? randn_leaf({g.Cout}, seed++, false) : Tensor();
    for (Precision p : {Precision::F32, Precision::Int8, Precision::BF16}) {
      const std::string precision = precision_name(p);  // CAPTURE keeps a reference: a named value
      CAPTURE(precision);
      CAPTURE(g.Cin);
      CAPTURE(g.k);
      CAPTURE(g.groups);
      const LowpConv2d conv(p, w, b, g.stride, g.padding, g.groups);
      const bool depthwise = g.groups == g.Cin && g.Cout == g.Cin;  // float32 at every precision
      const bool bf16 = p == Precision::BF16 && bf16_native() && !depthwise;
      CHECK(conv.runs_bf16() == bf16);
      // bf16: the products of the rounded operands are exact in float32; only the sums' order differs
      const Tensor ref = bf16 ? conv2d(rounded_to_bf16(x), rounded_to_bf16(w), b, g.stride, g.padding, g.groups)
                              : conv2d(x, w, b, g.stride, g.padding, g.groups);
      const Tensor y = conv.forward(x);
      REQUIRE(y.shape() == ref.shape());
      CHECK(rel_l2_error(y, ref) < 1e-6);
      const Tensor y_last = conv.forward(nhwc(x), ConvLayout::NHWC, ConvLayout::NHWC);
      REQUIRE(y_last.shape() == nhwc(ref).shape());
      CHECK(rel_l2_error(y_last, nhwc(ref)) < 1e-6);
      CHECK(rel_l2_error(conv.forward(x, ConvLayout::NCHW, ConvLayout::NHWC), nhwc(ref)) < 1e-6);
      CHECK(rel_l2_error(conv.forward(nhwc(x), ConvLayout::NHWC, ConvLayout::NCHW), ref) < 1e-6);
    }
  }
}

TEST_CASE("LowpConv2d: a second batch size gets its own plan, the packed weights stay right, an empty batch is empty") {
  const Tensor w = randn_leaf({8, 4, 3, 3}, 70, false), b = randn_leaf({8}, 71, false);
  const LowpConv2d conv(Precision::F32, w, b, 1, 1, 1);
  CHECK(conv.forward(empty({0, 4, 6, 6})).shape() == Shape({0, 8, 6, 6}));  // an empty batch
  for (int64_t B : {4, 1, 4, 3}) {
    CAPTURE(B);
    const Tensor x = randn_leaf({B, 4, 6, 6}, 72 + uint64_t(B), false);
    CHECK(rel_l2_error(conv.forward(x), conv2d(x, w, b, 1, 1, 1)) < 1e-6);
  }
}

TEST_CASE("Conv2d with lowp: float32 bit for bit when a gradient is asked for") {
  Conv2d conv(3, 6, 3, 2, 1);
  conv.lowp = std::make_shared<const LowpConv2d>(Precision::BF16, conv.weight, conv.bias, 2, 1, 1);
  const Tensor x = randn_leaf({2, 3, 8, 8}, 80, true);
  const Tensor y = conv.forward(x), ref = conv2d(x, conv.weight, conv.bias, 2, 1, 1);
  CHECK(max_abs_diff(y, ref) == 0.f);
  CHECK(y.requires_grad());
  NoGradGuard ng;
  const Tensor yl = conv.forward(x.detach());
  CHECK(rel_l2_error(yl, ref) < (bf16_native() ? 1e-2 : 1e-6));  // the oneDNN path ran
}

TEST_CASE("LowpConv2d: a wrong input or weight is a clear error") {
  const LowpConv2d conv(Precision::F32, randn_leaf({8, 4, 3, 3}, 90, false), Tensor(), 1, 0, 1);
  CHECK(error_message([&] { conv.forward(randn_leaf({2, 5, 6, 6}, 91, false)); }).find("must be (B, 4, H, W)") !=
        std::string::npos);
  CHECK(error_message([&] { conv.forward(randn_leaf({2, 6, 6, 5}, 92, false), ConvLayout::NHWC); })
            .find("must be (B, H, W, 4)") != std::string::npos);
  CHECK(error_message([&] { conv.forward(randn_leaf({2, 4, 2, 2}, 93, false)); }).find("bigger than the padded") !=
        std::string::npos);
  CHECK(error_message([&] { LowpConv2d(Precision::F32, randn_leaf({8, 4, 3}, 94, false), Tensor(), 1, 0, 1); })
            .find("must be (Cout, Cin/groups, k, k)") != std::string::npos);
}
