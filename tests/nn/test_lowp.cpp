// Reduced-precision GEMMs (core/ops/lowp_gemm.h, core/ops/quantize.h, docs/precision.md):
// - int8 LowpLinear equals the quantization arithmetic done by hand in double: the int32
//   sums through oneDNN are exact (no int16 saturation on AVX2), the scales and the bias right;
// - int8 / bf16 against float32 within the stated bounds; int8_bmm and SimA's int8 core too;
// - a Linear with lowp set runs float32, bit for bit, whenever a gradient is asked for;
// - bad precision names and bad stored weights are clear errors;
// - the vectorised bf16 conversion, bf16 products against float32 on rounded operands, and an
//   MLP's activation fused into fc1's low-precision product against the modules one by one;
// - lowp_mlp (the hidden layer kept in bf16 between fc1 and fc2) against the two products.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

#include "core/autograd.h"
#include "core/ops/activation.h"
#include "core/ops/lowp_gemm.h"
#include "core/ops/matmul.h"
#include "nn/attention/sima.h"
#include "nn/linear.h"
#include "nn/mlp.h"
#include "testing.h"

using namespace sima;
using sima::testing::error_message;
using sima::testing::max_abs_diff;
using sima::testing::randn_leaf;
using sima::testing::rel_l2_error;

namespace {

// y[m,n] = s_x[m] s_w[n] Σ_k x_q w_q + b[n], with the quantization of quantize.h, in double.
Tensor int8_reference(const Tensor& x, const Tensor& w, const Tensor& b) {
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  const int Q = int8_input_range();
  std::vector<int8_t> wq(size_t(N * K));
  std::vector<float> sw(static_cast<size_t>(N));
  quantize_rows_s8(w.data(), N, K, wq.data(), sw.data());
  Tensor y = empty({M, N});
  for (int64_t m = 0; m < M; ++m) {
    float amax = 0;
    for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(x.data()[m * K + k]));
    const float sx = amax / float(Q);
    for (int64_t n = 0; n < N; ++n) {
      int64_t acc = 0;
      for (int64_t k = 0; k < K; ++k)
        acc += int64_t(std::nearbyint(x.data()[m * K + k] * (1.f / sx))) * wq[size_t(n * K + k)];
      y.data()[m * N + n] = float(double(acc) * sx * sw[size_t(n)] + b.data()[n]);
    }
  }
  return y;
}

}  // namespace

TEST_CASE("int8 LowpLinear: exact int32 sums, per-channel and per-row scales, bias") {
  // K = 192: a sum of 192 products of up to 127·127 (8 bits) or 127·127 with Q = 63 inputs;
  // large enough that int16 saturation inside the kernel would show.
  const Tensor x = randn_leaf({67, 192}, 1, false), w = randn_leaf({576, 192}, 2, false);
  const Tensor b = randn_leaf({576}, 3, false);
  const Tensor y = LowpLinear(Precision::Int8, w, b).forward(x), ref = int8_reference(x, w, b);
  CHECK(max_abs_diff(y, ref) <= 1e-4f * 40);  // float rounding of the dequantisation only
  CHECK(rel_l2_error(y, ref) < 1e-6);
}

TEST_CASE("int8 and bf16 LowpLinear against float32: relative error within the bounds") {
  const Tensor x = randn_leaf({130, 192}, 4, false), w = randn_leaf({96, 192}, 5, false);
  const Tensor b = randn_leaf({96}, 6, false);
  const Tensor y32 = linear(x, w, b);
  // int8: per-element input step s_x/2 with s_x = max|x|/Q; Gaussian rows: about 1% at Q = 63
  const double e8 = rel_l2_error(LowpLinear(Precision::Int8, w, b).forward(x), y32);
  const double e16 = rel_l2_error(LowpLinear(Precision::BF16, w, b).forward(x), y32);
  MESSAGE("int8 rel err " << e8 << " (Q = " << int8_input_range() << "), bf16 rel err " << e16);
  CHECK(e8 < 0.02);
  CHECK(e16 < 0.005);  // 8 mantissa bits: 2^-9 per operand
  // (..., in) inputs keep their leading shape
  const Tensor y3 = LowpLinear(Precision::Int8, w, b).forward(reshape(x, {2, 65, 192}));
  CHECK(y3.shape() == Shape({2, 65, 96}));
}

TEST_CASE("int8_bmm: both transposes against float32 matmul") {
  const int64_t P = 6, m = 65, n = 64, k = 48;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const Tensor A = randn_leaf(ta ? Shape{P, k, m} : Shape{P, m, k}, 7, false);
      const Tensor B = randn_leaf(tb ? Shape{P, n, k} : Shape{P, k, n}, 8, false);
      Tensor C = empty({P, m, n});
      int8_bmm(P, ta, tb, m, n, k, A.data(), B.data(), C.data());
      const double e = rel_l2_error(C, matmul(A, B, ta, tb));
      INFO("ta " << ta << " tb " << tb << " rel err " << e);
      CHECK(e < 0.02);
    }
}

TEST_CASE("SimA's int8 core against float32, both product orders") {
  const Tensor q = randn_leaf({2, 3, 65, 32}, 9, false), k = randn_leaf({2, 3, 65, 32}, 10, false);
  const Tensor v = randn_leaf({2, 3, 65, 32}, 11, false);
  for (SimaOrder order : {SimaOrder::QkFirst, SimaOrder::KvFirst}) {
    const Tensor ref = sima_attention(q, k, v, SimaNorm::L1, order);
    const double e = rel_l2_error(sima_attention_int8(q, k, v, SimaNorm::L1, order, 1e-12f), ref);
    MESSAGE("SimA int8 core, order " << (order == SimaOrder::QkFirst ? "qk_first" : "kv_first") << ": rel err " << e);
    CHECK(e < 0.03);
  }
}

TEST_CASE("Linear with lowp: float32 bit for bit when a gradient is asked for") {
  Linear lin(24, 16);
  const Tensor x = randn_leaf({5, 24}, 12, false);
  const Tensor y32 = lin.forward(x);
  lin.lowp = std::make_shared<const LowpLinear>(Precision::Int8, lin.weight, lin.bias);
  CHECK(max_abs_diff(lin.forward(x), y32) == 0.f);  // weight requires grad, grad mode on
  NoGradGuard ng;
  const Tensor y8 = lin.forward(x);
  CHECK(max_abs_diff(y8, y32) > 0.f);
  CHECK(rel_l2_error(y8, y32) < 0.03);
}

TEST_CASE("precision names and stored int8 weights are checked") {
  CHECK(parse_precision("int8", "--precision") == Precision::Int8);
  CHECK(error_message([] { parse_precision("fp16", "--precision"); }) ==
        "--precision: precision must be one of fp32, bf16, int8 (got 'fp16')");
  const Tensor none;
  CHECK(error_message([&] { LowpLinear({1, 2, 3, 4}, {1.f, -1.f}, 2, 2, none); }).find("scale[1] = -1") !=
        std::string::npos);
  CHECK(error_message([&] { LowpLinear({1, 2, 3, 4}, {1.f, NAN}, 2, 2, none); }).find("scale[1] = nan") !=
        std::string::npos);
  CHECK(error_message([&] { LowpLinear({1, 2, -128, 4}, {1.f, 1.f}, 2, 2, none); }).find("outside [-127, 127]") !=
        std::string::npos);
  CHECK(error_message([&] { LowpLinear({1, 2, 3}, {1.f, 1.f}, 2, 2, none); }).find("3 values and 2 scales") !=
        std::string::npos);
  CHECK(error_message([&] { LowpLinear(Precision::F32, randn_leaf({2, 3}, 1, false), randn_leaf({3}, 2, false)); })
            .find("does not match weight") != std::string::npos);
}

TEST_CASE("fp32 LowpLinear (weights packed by oneDNN): float32 results up to the order of the sums") {
  // The shapes of a DeiT-Tiny block at batch 1 (65 tokens) and at a few other row counts,
  // with and without bias; the plan cache keeps one primitive per row count.
  for (int64_t M : {int64_t(1), int64_t(65), int64_t(130), int64_t(65)})
    for (const auto& [out_, in_] : {std::pair<int64_t, int64_t>{576, 192}, {192, 768}, {10, 7}})
      for (bool with_bias : {true, false}) {
        const auto& out = out_; const auto& in = in_;  // clang 14 cannot capture a structured binding
        CAPTURE(M);
        CAPTURE(out);
        CAPTURE(with_bias);
        const Tensor x = randn_leaf({M, in}, 20, false), w = randn_leaf({out, in}, 21, false);
        const Tensor b = with_bias ? randn_leaf({out}, 22, false) : Tensor();
        const Tensor ref = linear(x, w, b);
        const Tensor y = LowpLinear(Precision::F32, w, b).forward(x);
        CHECK(y.shape() == ref.shape());
        CHECK(rel_l2_error(y, ref) < 1e-6);  // float32 rounding: about 1e-7 per sum of `in` terms
        CHECK(max_abs_diff(y, ref) < 1e-4f);
      }
  // The weight is copied: a later change to the Tensor does not reach the packed one.
  const Tensor x = randn_leaf({3, 8}, 23, false), w = randn_leaf({4, 8}, 24, false);
  const LowpLinear packed(Precision::F32, w, Tensor());
  const Tensor before = packed.forward(x);
  w.data()[0] += 1.f;
  CHECK(max_abs_diff(packed.forward(x), before) == 0.f);
}

TEST_CASE("floats_to_bf16_bits: the scalar rounding on every kind of float, at any length") {
  std::vector<float> x = {0.f, -0.f, 1.f, -1.f, 1.00390625f, 1.01171875f,  // ties to even, both ways
                          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::signaling_NaN(),
                          std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::min(), 3.4e38f, -1e-40f};
  const Tensor r = randn_leaf({100003}, 30, false);  // long enough to be split across threads
  x.insert(x.end(), r.data(), r.data() + r.numel());
  std::vector<uint16_t> y(x.size());
  floats_to_bf16_bits(x.data(), y.data(), int64_t(x.size()));
  int64_t wrong = 0;
  for (size_t i = 0; i < x.size(); ++i) wrong += y[i] != float_to_bf16_bits(x[i]);
  CHECK(wrong == 0);
  CHECK(y[8] == 0x7fc0);  // NaN stays a quiet NaN
  CHECK(y[4] == 0x3f80);  // 1 + 2^-8 is a tie: to the even 1
  CHECK(y[5] == 0x3f82);  // 1 + 3·2^-8 is a tie: to the even 1 + 2^-6
}

TEST_CASE("bf16 LowpLinear equals float32 products of the bf16-rounded operands, bias added") {
  const Tensor x = randn_leaf({65, 192}, 31, false), w = randn_leaf({96, 192}, 32, false);
  const Tensor b = randn_leaf({96}, 33, false);
  Tensor xr = empty(x.shape()), wr = empty(w.shape());
  for (int64_t i = 0; i < x.numel(); ++i) xr.data()[i] = round_to_bf16(x.data()[i]);
  for (int64_t i = 0; i < w.numel(); ++i) wr.data()[i] = round_to_bf16(w.data()[i]);
  for (bool with_bias : {true, false}) {
    CAPTURE(with_bias);
    const Tensor bb = with_bias ? b : Tensor();
    const Tensor ref = linear(xr, wr, bb), y = LowpLinear(Precision::BF16, w, bb).forward(x);
    CHECK(rel_l2_error(y, ref) < 1e-6);  // only the order of the float32 sums differs
  }
}

TEST_CASE("LowpLinear with a fused activation equals the activation after the product") {
  const Tensor x = randn_leaf({2, 65, 64}, 34, false), w = randn_leaf({256, 64}, 35, false);
  const Tensor b = randn_leaf({256}, 36, false);
  const std::pair<MlpActivation, Tensor (*)(const Tensor&)> acts[] = {
      {MlpActivation::Gelu, gelu}, {MlpActivation::QuickGelu, quick_gelu}, {MlpActivation::Relu, relu}};
  for (Precision p : {Precision::F32, Precision::BF16, Precision::Int8})
    for (const auto& [kind_, fn_] : acts) {
      const auto& kind = kind_; const auto& fn = fn_;  // clang 14 cannot capture a structured binding
      const std::string precision = precision_name(p);  // CAPTURE keeps a reference: a named value
      CAPTURE(precision);
      CAPTURE(int(kind));
      const LowpLinear lin(p, w, b);
      const Tensor fused = lin.forward(x, kind), composed = fn(lin.forward(x));
      CHECK(fused.shape() == composed.shape());
      CHECK(max_abs_diff(fused, composed) <= 1e-5f);  // the same function, vectorised differently
    }
}

TEST_CASE("an Mlp at reduced precision: fc1's fused activation equals the modules one by one") {
  for (Precision p : {Precision::F32, Precision::BF16, Precision::Int8})
    for (const char* act : {"gelu", "relu"}) {
      const std::string precision = precision_name(p);  // CAPTURE keeps a reference: a named value
      CAPTURE(precision);
      CAPTURE(act);
      Mlp mlp(48, 192, 48, act, 0.f);
      mlp.eval();
      for (auto* lin : {mlp.fc1.get(), mlp.fc2.get()})
        lin->lowp = std::make_shared<const LowpLinear>(p, lin->weight, lin->bias);
      const Tensor x = randn_leaf({3, 50, 48}, 37, false);
      NoGradGuard ng;
      const Tensor fused = mlp.forward(x);
      mlp.fused = false;
      const Tensor one_by_one = mlp.forward(x);
      CHECK(max_abs_diff(fused, one_by_one) <= 1e-4f);
    }
}

TEST_CASE("lowp_mlp equals fc2 after fc1 with its fused activation, at every precision") {
  const Tensor x = randn_leaf({3, 50, 48}, 38, false);
  const Tensor w1 = randn_leaf({192, 48}, 39, false), b1 = randn_leaf({192}, 40, false);
  const Tensor w2 = randn_leaf({24, 192}, 41, false), b2 = randn_leaf({24}, 42, false);
  for (Precision p : {Precision::F32, Precision::BF16, Precision::Int8})
    for (MlpActivation act : {MlpActivation::Gelu, MlpActivation::Relu}) {
      const std::string precision = precision_name(p);  // CAPTURE keeps a reference: a named value
      CAPTURE(precision);
      CAPTURE(int(act));
      const LowpLinear fc1(p, w1, b1), fc2(p, w2, b2);
      const Tensor chained = lowp_mlp(fc1, fc2, x, act), two = fc2.forward(fc1.forward(x, act));
      REQUIRE(chained.shape() == Shape({3, 50, 24}));
      // bf16: both round fc1's float32 output to nearest even; the sums' order may differ
      if (p == Precision::BF16) CHECK(rel_l2_error(chained, two) < 1e-6);
      else CHECK(max_abs_diff(chained, two) == 0.f);
    }
  const LowpLinear a(Precision::BF16, w1, b1), b(Precision::BF16, w2, b2);
  CHECK(error_message([&] { lowp_mlp(a, b, randn_leaf({4, 47}, 43, false), MlpActivation::Gelu); })
            .find("does not end in 48 features") != std::string::npos);
}
